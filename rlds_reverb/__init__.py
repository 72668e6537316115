"""rlds-reverb: RLDS datasets to TF-Agents trajectories in Reverb tables, fast.

See `rlds_reverb.types` for what an RLDS dataset is here. Modules are named by concern
(`loading`, `validation`, `convert`, ...) so that the functions exported here never shadow
them.
"""

from rlds_reverb import checkpoints, items, observers, priorities, sampling, tables
from rlds_reverb.convert import convert_rlds_to_trajectories
from rlds_reverb.errors import (
    InvalidEpisodeError,
    RldsReverbError,
    SourceError,
    SourceNotFoundError,
    SpecMismatchError,
)
from rlds_reverb.loading import load
from rlds_reverb.server import seed_server
from rlds_reverb.specs import create_trajectory_data_spec, get_rlds_step_features
from rlds_reverb.types import EndBehavior, ValidationMode
from rlds_reverb.validation import ValidationReport, validate
from rlds_reverb.version import __version__
from rlds_reverb.writers import PushStats, push, push_rlds_to_reverb

__all__ = [
    'EndBehavior',
    'PushStats',
    'InvalidEpisodeError',
    'RldsReverbError',
    'SourceError',
    'SourceNotFoundError',
    'SpecMismatchError',
    'ValidationMode',
    'ValidationReport',
    '__version__',
    'convert_rlds_to_trajectories',
    'create_trajectory_data_spec',
    'get_rlds_step_features',
    'checkpoints',
    'items',
    'load',
    'observers',
    'priorities',
    'push',
    'push_rlds_to_reverb',
    'sampling',
    'seed_server',
    'tables',
    'validate',
]
