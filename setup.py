"""Packaging for rlds-reverb: RLDS datasets to TF-Agents trajectories in Reverb."""

import pathlib
import re

import setuptools

_ROOT = pathlib.Path(__file__).parent
_VERSION = re.search(
    r"__version__ = '([^']+)'", (_ROOT / 'rlds_reverb' / 'version.py').read_text()
).group(1)

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
    # Versions live in constraints.txt (one place); these name what is needed.
    install_requires=[
        'tensorflow',
        'dm-reverb',
        'tf-agents',
        'tensorflow-probability',
        'rlds',
        'tensorflow-datasets',
        'tensorflow-metadata',
        'gym',
        'numpy',
        'tqdm',
        'matplotlib',
    ],
    extras_require={
        'test': ['pytest', 'ruff', 'mypy', 'nbclient', 'nbformat', 'ipykernel', 'hypothesis'],
        # Ingestion on Apache Beam (rlds_reverb.distribute); `make test` installs it.
        'beam': ['apache-beam'],
    },
    entry_points={'console_scripts': ['rlds-reverb=rlds_reverb.cli:run']},
)
