"""Packaging for rlds-reverb: RLDS datasets to TF-Agents trajectories in Reverb."""

import pathlib
import re

import setuptools

_ROOT = pathlib.Path(__file__).parent
_VERSION = re.search(
    r"__version__ = '([^']+)'", (_ROOT / 'rlds_reverb' / 'version.py').read_text()
).group(1)

# Compatible ranges, so that `pip install rlds-reverb` anywhere resolves a stack that loads:
# dm-reverb's wheels are built against one TensorFlow (0.14 against 2.15), and TF-Agents and
# TensorFlow Probability follow it. The exact versions CI runs are pinned in constraints.txt,
# each inside these ranges (tests/test_packaging.py checks both).
_INSTALL_REQUIRES = [
    'tensorflow>=2.15.1,<2.16',
    'dm-reverb>=0.14.0,<0.15',
    'tf-agents>=0.19.0,<0.20',
    'tensorflow-probability>=0.23.0,<0.24',
    'rlds>=0.1.8,<0.2',
    # The loader reads TFDS's file instructions and example parser (tfds.core internals).
    'tensorflow-datasets>=4.9.4,<4.10',
    # 1.15 is the first to allow the compiled protobuf 4.25 on Python 3.11 (1.14 caps it below
    # 4.21, where Python 3.11 gets only pure-Python protobuf); 1.21 needs protobuf 5.
    'tensorflow-metadata>=1.15.0,<1.16',
    # TensorFlow 2.15 needs protobuf < 5; 4.25 is the compiled (upb) build that TFMD 1.15 needs.
    'protobuf>=4.25.2,<5',
    # TF-Agents 0.19 allows gym <= 0.23.0.
    'gym>=0.23.0,<0.24',
    # TensorFlow 2.15 is built against NumPy 1.
    'numpy>=1.23.5,<2',
    'tqdm>=4.66,<5',
    'matplotlib>=3.8,<4',
    # Minari and D4RL files: HDF5 (h5py) and Arrow (pyarrow).
    'h5py>=3.10,<4',
    'pyarrow>=14,<26',
    # LeRobot datasets: PNG frames (Pillow; 12 writes the same bytes as LeRobot's own PNGs)
    # and AV1 video (PyAV bundles FFmpeg with dav1d and SVT-AV1; 15 is LeRobot 0.6.1's pin).
    'pillow>=12,<13',
    'av>=15.1,<16',
]
_EXTRAS_REQUIRE = {
    'test': [
        'pytest>=8.3,<9',
        'ruff>=0.7.4,<0.8',
        # 1.10 is the newest mypy that accepts typing-extensions 4.5 (TensorFlow 2.15 needs it).
        'mypy>=1.10.1,<1.11',
        'nbclient>=0.10,<0.11',
        'nbformat>=5.10,<6',
        'ipykernel>=6.29,<7',
        'hypothesis>=6.100,<7',
        # `make test` runs the suite on two workers (tests/conftest.py: xdist groups).
        'pytest-xdist>=3.6,<4',
        # Records RLDS through envlogger's TFDS backend in the tests (1.3 dropped it).
        'envlogger>=1.2,<1.3',
        'dm-env>=1.6,<2',
        # Drives headless Chromium (Debian's package) to check the HTML report.
        'websocket-client>=1.8,<2',
    ],
    # The documentation site: `make docs` (built in the tests with --strict).
    'docs': [
        'mkdocs>=1.6,<1.7',
        'mkdocs-material>=9.5,<10',
        'mkdocstrings[python]>=0.26,<2',
    ],
    # Ingestion on Apache Beam (rlds_reverb.distribute); `make test` installs it. The pipeline
    # drives Beam's FnApiRunner through modules that are not Beam's public API: one minor.
    'beam': ['apache-beam>=2.77.0,<2.78'],
}

setuptools.setup(
    name='rlds-reverb',
    version=_VERSION,
    description='RLDS datasets to TF-Agents trajectories in Reverb tables, fast.',
    long_description=(_ROOT / 'README.md').read_text(),
    long_description_content_type='text/markdown',
    python_requires='>=3.11,<3.12',
    packages=setuptools.find_packages(
        include=['rlds_reverb', 'rlds_reverb.*', 'adders', 'adders.*']
    ),
    install_requires=_INSTALL_REQUIRES,
    extras_require=_EXTRAS_REQUIRE,
    entry_points={'console_scripts': ['rlds-reverb=rlds_reverb.cli:run']},
)
