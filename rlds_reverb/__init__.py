"""rlds-reverb: RLDS datasets to TF-Agents trajectories in Reverb tables, fast.

The package is arranged by role, in the order data flows through it; each room imports only
itself and the rooms listed before it:

    core/       vocabulary (field names, enums), errors, argument checks, specs, episode tensors
    storage/    RLDS on disk: the TFDS dataset writer
    read/       open RLDS datasets (TFDS directory, TFDS name, `tf.data`) as whole episodes
    check/      validate and describe datasets
    adders/     (the top-level `adders` package) tf.data transforms: n-step, GAE, sequences,
                frame stacking; they build on `core` only
    transform/  two-step trajectories (TF-Agents drop-in), item kinds, per-episode write plans
    serve/      table presets and lookups, servers, checkpoints
    write/      push into Reverb (writer engines), observers, resumable pushes, seeding
    distribute/ the Apache Beam pipeline: push into several Reverb servers (`beam` extra)
    learn/      learner datasets: mixing, importance weights, priority updates
    export/     back to RLDS: export Reverb tables, record TF-Agents drivers
    examples/   the embedded CartPole data, synthetic data, the demo agent (offline CQL-DQN)
    cli/        the `rlds-reverb` command line

The names below are the public API (`__all__`). They load on first use, so that
`import rlds_reverb` (and the command line) starts without importing TensorFlow until
something needs it; type checkers and IDEs read the same names from the
`if TYPE_CHECKING:` imports (`tests/system/test_api.py` keeps the two lists equal). See
`rlds_reverb.core.types` for what an RLDS dataset is here.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from rlds_reverb.core import deprecation
from rlds_reverb.version import __version__

deprecation.install_moved_module_finder()  # The 0.1 module paths keep working until 0.3.

# Public name -> 'module' (the module itself) or 'module:attribute'.
_EXPORTS = {
    # Modules that are part of the public API under short names (`deprecation.PUBLIC_ALIASES`
    # makes `import rlds_reverb.items` work too).
    **{old.rpartition('.')[2]: new for old, new in deprecation.PUBLIC_ALIASES.items()},
    # Functions and classes.
    'EndBehavior': 'rlds_reverb.core.types:EndBehavior',
    'ValidationMode': 'rlds_reverb.core.types:ValidationMode',
    'InvalidEpisodeError': 'rlds_reverb.core.errors:InvalidEpisodeError',
    'RldsReverbError': 'rlds_reverb.core.errors:RldsReverbError',
    'SourceError': 'rlds_reverb.core.errors:SourceError',
    'SourceNotFoundError': 'rlds_reverb.core.errors:SourceNotFoundError',
    'SpecMismatchError': 'rlds_reverb.core.errors:SpecMismatchError',
    'create_trajectory_data_spec': 'rlds_reverb.core.specs:create_trajectory_data_spec',
    'get_rlds_step_features': 'rlds_reverb.core.specs:get_rlds_step_features',
    'load': 'rlds_reverb.read.loading:load',
    'validate': 'rlds_reverb.check.validation:validate',
    'ValidationReport': 'rlds_reverb.check.validation:ValidationReport',
    'write_report': 'rlds_reverb.check.report_html:write_report',
    'convert_rlds_to_trajectories': 'rlds_reverb.transform.convert:convert_rlds_to_trajectories',
    'PushOptions': 'rlds_reverb.write.options:PushOptions',
    'PushStats': 'rlds_reverb.write.push:PushStats',
    'push': 'rlds_reverb.write.push:push',
    'push_rlds_to_reverb': 'rlds_reverb.write.push:push_rlds_to_reverb',
    'seed_server': 'rlds_reverb.write.seed:seed_server',
    'ExportError': 'rlds_reverb.core.errors:ExportError',
    'export_table': 'rlds_reverb.export.reverb_export:export_table',
    'RldsRecorder': 'rlds_reverb.export.recorder:RldsRecorder',
    # Needs the `beam` extra (Apache Beam); imported only when used.
    'push_with_beam': 'rlds_reverb.distribute.pipeline:push_with_beam',
}

__all__ = [
    'EndBehavior',
    'ExportError',
    'InvalidEpisodeError',
    'PushOptions',
    'PushStats',
    'RldsRecorder',
    'RldsReverbError',
    'SourceError',
    'SourceNotFoundError',
    'SpecMismatchError',
    'ValidationMode',
    'ValidationReport',
    '__version__',
    'checkpoints',
    'convert_rlds_to_trajectories',
    'create_trajectory_data_spec',
    'export_table',
    'get_rlds_step_features',
    'items',
    'load',
    'observers',
    'priorities',
    'push',
    'push_rlds_to_reverb',
    'push_with_beam',
    'sampling',
    'seed_server',
    'tables',
    'validate',
    'write_report',
]

if TYPE_CHECKING:
    # The same names as `_EXPORTS`, written out for type checkers and IDEs (never run).
    from rlds_reverb.check.report_html import write_report as write_report
    from rlds_reverb.check.validation import ValidationReport as ValidationReport
    from rlds_reverb.check.validation import validate as validate
    from rlds_reverb.core.errors import ExportError as ExportError
    from rlds_reverb.core.errors import InvalidEpisodeError as InvalidEpisodeError
    from rlds_reverb.core.errors import RldsReverbError as RldsReverbError
    from rlds_reverb.core.errors import SourceError as SourceError
    from rlds_reverb.core.errors import SourceNotFoundError as SourceNotFoundError
    from rlds_reverb.core.errors import SpecMismatchError as SpecMismatchError
    from rlds_reverb.core.specs import create_trajectory_data_spec as create_trajectory_data_spec
    from rlds_reverb.core.specs import get_rlds_step_features as get_rlds_step_features
    from rlds_reverb.core.types import EndBehavior as EndBehavior
    from rlds_reverb.core.types import ValidationMode as ValidationMode
    from rlds_reverb.distribute.pipeline import push_with_beam as push_with_beam
    from rlds_reverb.export.recorder import RldsRecorder as RldsRecorder
    from rlds_reverb.export.reverb_export import export_table as export_table
    from rlds_reverb.learn import priorities as priorities
    from rlds_reverb.learn import sampling as sampling
    from rlds_reverb.read.loading import load as load
    from rlds_reverb.serve import checkpoints as checkpoints
    from rlds_reverb.serve import tables as tables
    from rlds_reverb.transform import items as items
    from rlds_reverb.transform.convert import (
        convert_rlds_to_trajectories as convert_rlds_to_trajectories,
    )
    from rlds_reverb.write import observers as observers
    from rlds_reverb.write.options import PushOptions as PushOptions
    from rlds_reverb.write.push import PushStats as PushStats
    from rlds_reverb.write.push import push as push
    from rlds_reverb.write.push import push_rlds_to_reverb as push_rlds_to_reverb
    from rlds_reverb.write.seed import seed_server as seed_server


if not TYPE_CHECKING:  # Type checkers see the static names above; a typo stays an error.

    def __getattr__(name: str) -> Any:
        """Imports a public name on first use (PEP 562) and caches it in the module."""
        target = _EXPORTS.get(name)
        if target is None:
            raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
        module_name, _, attribute = target.partition(':')
        value = importlib.import_module(module_name)
        if attribute:
            value = getattr(value, attribute)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(globals()) | set(_EXPORTS))
