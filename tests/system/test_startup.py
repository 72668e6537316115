"""The command line answers `--help` without loading the heavy libraries (issue 22).

Behaviour, not timing: the benchmark `benchmarks/cli.py` measures how long the answers take.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import rlds

from rlds_reverb.cli import app
from rlds_reverb.core import types

# What `--help` must not import: each takes from 0.4 s (TFDS) to seconds (TensorFlow).
_HEAVY = ('tensorflow', 'tf_agents', 'tensorflow_datasets', 'reverb', 'apache_beam', 'gym')

_PROBE = """
import contextlib, sys
from rlds_reverb import cli
with contextlib.suppress(SystemExit), contextlib.redirect_stdout(None):
    cli.{entry}({argv!r})
heavy = {heavy!r}
print(' '.join(sorted({{m.split('.')[0] for m in sys.modules}} & set(heavy))))
"""


def _commands() -> list[str]:
    parser = app.build_parser()
    return sorted(parser._subparsers._group_actions[0].choices)  # noqa: SLF001


def _run_probes(calls: list[tuple[str, list[str]]], subprocess_env: dict[str, str]) -> list[str]:
    """Runs each `cli.<entry>(argv)` in turn in one fresh interpreter; returns, after each,
    the heavy modules loaded so far (space-separated)."""
    code = '\n'.join(_PROBE.format(entry=e, argv=argv, heavy=_HEAVY) for e, argv in calls)
    out = subprocess.run(
        [sys.executable, '-c', code],
        env=subprocess_env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout.split('\n')[:-1]


def test_rlds_field_names_are_rlds_own():
    # types spells them out (no RLDS import); they must stay RLDS' values.
    assert (
        types.STEPS,
        types.OBSERVATION,
        types.ACTION,
        types.REWARD,
        types.DISCOUNT,
        types.IS_FIRST,
        types.IS_LAST,
        types.IS_TERMINAL,
    ) == (
        rlds.STEPS,
        rlds.OBSERVATION,
        rlds.ACTION,
        rlds.REWARD,
        rlds.DISCOUNT,
        rlds.IS_FIRST,
        rlds.IS_LAST,
        rlds.IS_TERMINAL,
    )


@pytest.mark.parametrize('entry', ['main', 'run'])
def test_help_imports_no_heavy_library(subprocess_env, entry):
    assert _run_probes([(entry, ['--help'])], subprocess_env) == ['']


def test_every_command_help_imports_no_heavy_library(subprocess_env):
    commands = _commands()
    assert {'info', 'validate', 'push', 'serve', 'demo', 'export', 'record'} <= set(commands)
    imported = _run_probes([('main', [c, '--help']) for c in commands], subprocess_env)
    assert imported == [''] * len(commands), dict(zip(commands, imported, strict=True))


def test_info_on_a_tfds_directory_imports_no_heavy_library(subprocess_env, cartpole_dir):
    # `info` summarizes a TFDS directory from its record files (rlds_reverb.check.summary).
    assert _run_probes([('main', ['info', str(cartpole_dir)])], subprocess_env) == ['']


def test_moved_enums_are_the_same_classes():
    from rlds_reverb.serve import tables
    from rlds_reverb.transform import items

    assert items.ItemName is types.ItemName
    assert items.EpisodeOverflow is types.EpisodeOverflow
    assert tables.TablePreset is types.TablePreset
