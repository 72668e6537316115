"""Packaging: setup.py declares compatible ranges, and its wheel installs a working stack.

* Fast: every requirement in setup.py has a version range, and each exact pin of
  constraints.txt (what CI installs) lies inside the range setup.py declares for it.
* Slow (once per suite): the wheel, built with `pip wheel --no-deps`, installed with its
  `beam` extra into a fresh venv without constraints.txt (what `pip install rlds-reverb`
  does anywhere), passes `pip check`, answers `rlds-reverb --help`, imports from that venv,
  and runs a real job (`tests/packaging_smoke.py`: CartPole data, validate, convert, push into
  an in-process Reverb server, sample, Beam). It never touches the repository's .venv:
  the source is copied to a temporary directory, built and installed there.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

_ROOT = pathlib.Path(__file__).resolve().parents[2]
_SMOKE = _ROOT / 'tests' / 'packaging_smoke.py'
# The stack whose versions must move together (dm-reverb's wheels are built against one
# TensorFlow), and what keeps it loading: setup.py must bound each of these.
_STACK = [
    'tensorflow',
    'dm-reverb',
    'tf-agents',
    'tensorflow-probability',
    'tensorflow-datasets',
    'rlds',
    'tensorflow-metadata',
    'protobuf',
    'gym',
    'numpy',
    'apache-beam',
]
# Top-level entries of the source tree that are not part of the package (and may be large).
_NOT_SOURCE = {
    '.git',
    '.venv',
    'build',
    'dist',
    'data',
    'notebooks',
    'benchmarks',
    'tests',
    '.hypothesis',
}
_NEVER_COPIED = ('__pycache__', '*.egg-info', '.pytest_cache', '.ruff_cache', '.ipynb_checkpoints')
# Environment variables that would let the fresh venv see this repository, another venv or
# the repository's constraints.
_LEAKING_VARIABLES = (
    'PYTHONPATH',
    'PYTHONHOME',
    'PYTHONSTARTUP',
    'VIRTUAL_ENV',
    'PIP_CONSTRAINT',
    'PIP_REQUIREMENT',
    'PIP_USER',
    'PIP_PREFIX',
    'PIP_TARGET',
)


def _read_setup_requirements() -> tuple[list[str], dict[str, list[str]]]:
    """Returns setup.py's `_INSTALL_REQUIRES` and `_EXTRAS_REQUIRE`, read without running it."""
    values = {}
    for node in ast.parse((_ROOT / 'setup.py').read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name) and target.id in (
                '_INSTALL_REQUIRES',
                '_EXTRAS_REQUIRE',
            ):
                values[target.id] = ast.literal_eval(node.value)
    if set(values) != {'_INSTALL_REQUIRES', '_EXTRAS_REQUIRE'}:
        raise AssertionError(
            'setup.py must define _INSTALL_REQUIRES and _EXTRAS_REQUIRE as literals; '
            f'found {sorted(values)}.'
        )
    return values['_INSTALL_REQUIRES'], values['_EXTRAS_REQUIRE']


def _read_all_requirements() -> dict[str, Requirement]:
    install_requires, extras_require = _read_setup_requirements()
    lines = [*install_requires, *(line for group in extras_require.values() for line in group)]
    requirements = [Requirement(line) for line in lines]
    return {canonicalize_name(r.name): r for r in requirements}


def _read_constraints() -> dict[str, str]:
    pins = {}
    for line in (_ROOT / 'constraints.txt').read_text().splitlines():
        line = line.split('#', 1)[0].strip()
        if line:
            name, _, version = line.partition('==')
            if not version:
                raise AssertionError(f'constraints.txt pins exact versions; got {line!r}.')
            pins[canonicalize_name(name)] = version.strip()
    return pins


def test_every_requirement_declares_a_compatible_range():
    # Unversioned names let pip pick a TensorFlow that dm-reverb 0.14 cannot load.
    unbounded = [
        str(r)
        for r in _read_all_requirements().values()
        if not any(s.operator in ('<', '<=', '==', '~=') for s in r.specifier)
        or not any(s.operator in ('>', '>=', '==', '~=') for s in r.specifier)
    ]
    assert unbounded == [], f'setup.py requirements without a lower and upper bound: {unbounded}'


def test_setup_bounds_the_whole_stack():
    requirements = _read_all_requirements()
    assert [name for name in _STACK if name not in requirements] == []
    # The stack dm-reverb 0.14 loads with, whatever newer releases exist.
    for name, newer in [
        ('tensorflow', '2.16.1'),
        ('dm-reverb', '0.15.0'),
        ('tf-agents', '0.20.0'),
        ('tensorflow-probability', '0.24.0'),
        ('protobuf', '5.26.1'),
        ('numpy', '2.0.0'),
    ]:
        assert not requirements[name].specifier.contains(newer), (name, newer)


def test_constraints_pins_lie_inside_the_declared_ranges():
    requirements = _read_all_requirements()
    pins = _read_constraints()
    outside = {
        name: (pins[name], str(requirement.specifier))
        for name, requirement in requirements.items()
        if name in pins and not requirement.specifier.contains(pins[name], prereleases=True)
    }
    assert outside == {}, f'constraints.txt pins outside setup.py ranges: {outside}'
    assert [
        name for name in requirements if name not in pins
    ] == [], 'every package setup.py names needs its exact pin in constraints.txt (CI installs it)'


# --- the built wheel in a fresh venv ---------------------------------------------------------


@dataclasses.dataclass
class _FreshVenv:
    root: pathlib.Path  # A scratch directory outside the repository (the commands' cwd).
    bin: pathlib.Path
    env: dict[str, str]
    seconds: dict[str, float]


def _make_clean_env(bin_dir: pathlib.Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _LEAKING_VARIABLES}
    env.update(
        PATH=f'{bin_dir}{os.pathsep}{env.get("PATH", "")}',
        PYTHONNOUSERSITE='1',
        PIP_NO_INPUT='1',
        PIP_DISABLE_PIP_VERSION_CHECK='1',
        TF_CPP_MIN_LOG_LEVEL='2',
    )
    return env


def _run(args: list, *, cwd: pathlib.Path, env: dict, timeout_s: float, what: str) -> str:
    """Runs `args`; returns its stdout, or fails the test naming `what`, the exit and output."""
    args = [str(a) for a in args]
    # A new session, so that a timeout ends the command's own children (pip's builds) too.
    process = subprocess.Popen(
        args,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        outcome = f'did not finish in {timeout_s:.0f} s'
    else:
        if process.returncode == 0:
            return stdout
        outcome = f'exited with {process.returncode}'
    pytest.fail(
        f'{what} {outcome}.\ncommand: {" ".join(args)}\n'
        f'--- stdout (end) ---\n{stdout[-4000:]}\n--- stderr (end) ---\n{stderr[-4000:]}',
        pytrace=False,
    )


def _ignore_non_source(directory: str, names: list[str]) -> set[str]:
    ignored = set(shutil.ignore_patterns(*_NEVER_COPIED)(directory, names))
    if pathlib.Path(directory) == _ROOT:
        ignored |= _NOT_SOURCE & set(names)
    return ignored


@pytest.fixture(scope='module')
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> _FreshVenv:
    """The wheel with its `beam` extra, installed into a new venv without constraints."""
    root = tmp_path_factory.mktemp('packaging')
    python = shutil.which('python3.11') or sys.executable
    venv = root / 'venv'
    env = _make_clean_env(venv / 'bin')
    seconds = {}

    def timed(name: str, args: list, timeout_s: float) -> str:
        start = time.monotonic()
        out = _run(args, cwd=root, env=env, timeout_s=timeout_s, what=name)
        seconds[name] = round(time.monotonic() - start, 1)
        return out

    # A copy, as setuptools writes build/ and *.egg-info next to setup.py.
    shutil.copytree(_ROOT, root / 'src', ignore=_ignore_non_source)
    timed('venv', [python, '-m', 'venv', venv], 300)
    # An explicit path: a bare directory name would be looked up on the index.
    timed('wheel', [venv / 'bin/python', '-m', 'pip', 'wheel', '--no-deps', '-w', root / 'dist',
                    root / 'src'], 600)  # fmt: skip
    (wheel,) = (root / 'dist').glob('rlds_reverb-*.whl')
    # The first install downloads about 1 GB (TensorFlow alone is 0.5 GB).
    timed('install', [venv / 'bin/python', '-m', 'pip', 'install', f'{wheel}[beam]'], 2400)
    return _FreshVenv(root=root, bin=venv / 'bin', env=env, seconds=seconds)


def _run_in(fresh: _FreshVenv, args: list, *, timeout_s: float, what: str) -> str:
    return _run(args, cwd=fresh.root, env=fresh.env, timeout_s=timeout_s, what=what)


@pytest.mark.slow  # Builds a venv and installs the stack into it: minutes.
def test_the_wheel_installs_a_consistent_stack(fresh_venv):
    print(f'fresh venv: seconds per step {fresh_venv.seconds}')
    _run_in(fresh_venv, [fresh_venv.bin / 'pip', 'check'], timeout_s=300, what='pip check')
    freeze = _run_in(fresh_venv, [fresh_venv.bin / 'pip', 'freeze'], timeout_s=300, what='freeze')
    installed = dict(line.split('==', 1) for line in freeze.splitlines() if '==' in line)
    installed = {canonicalize_name(name): version for name, version in installed.items()}
    requirements = _read_all_requirements()
    assert {
        name: installed.get(name)
        for name in _STACK
        if not requirements[name].specifier.contains(installed.get(name, '0'))
    } == {}


@pytest.mark.slow  # Needs the fresh venv (minutes, once per suite).
def test_the_installed_command_answers_help(fresh_venv):
    out = _run_in(
        fresh_venv, [fresh_venv.bin / 'rlds-reverb', '--help'], timeout_s=120, what='--help'
    )
    assert out.startswith('usage: rlds-reverb')


@pytest.mark.slow  # Needs the fresh venv (minutes, once per suite).
def test_the_stack_imports_from_the_fresh_venv(fresh_venv):
    code = (
        'import json, rlds_reverb, reverb, tf_agents, tensorflow; '
        'print(json.dumps([m.__file__ for m in (rlds_reverb, reverb, tf_agents, tensorflow)]))'
    )
    out = _run_in(
        fresh_venv, [fresh_venv.bin / 'python', '-c', code], timeout_s=300, what='the imports'
    )
    files = json.loads(out.splitlines()[-1])
    assert [f for f in files if not f.startswith(str(fresh_venv.root / 'venv'))] == []


@pytest.mark.slow  # Needs the fresh venv; the job itself takes about a minute (Beam included).
def test_a_real_job_runs_on_the_installed_stack(fresh_venv):
    # Run from a copy: a script's own directory comes first on sys.path, and tests/ must not.
    script = shutil.copy(_SMOKE, fresh_venv.root / _SMOKE.name)
    workdir = fresh_venv.root / 'job'
    out = _run_in(
        fresh_venv,
        [fresh_venv.bin / 'python', script, workdir],
        timeout_s=900,
        what='the smoke job (tests/packaging_smoke.py)',
    )
    found = json.loads(out.splitlines()[-1])
    print(f'smoke job: {found}')
    assert found['rlds_reverb_file'].startswith(str(fresh_venv.root / 'venv'))
    assert found['items'] > 0 and found['samples'] > 0 and found['beam_items'] == found['items']
    info = _run_in(
        fresh_venv,
        [fresh_venv.bin / 'rlds-reverb', 'info', found['dataset']],
        timeout_s=300,
        what='rlds-reverb info',
    )
    assert str(found['episodes']) in info
