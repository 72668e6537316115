"""rlds-reverb: RLDS datasets to TF-Agents trajectories in Reverb tables, fast.

See `rlds_reverb.types` for what an RLDS dataset is here.
"""

from rlds_reverb.convert import convert_rlds_to_trajectories
from rlds_reverb.specs import create_trajectory_data_spec, get_rlds_step_features
from rlds_reverb.validate import validate
from rlds_reverb.version import __version__

__all__ = [
    '__version__',
    'convert_rlds_to_trajectories',
    'create_trajectory_data_spec',
    'get_rlds_step_features',
    'validate',
]
