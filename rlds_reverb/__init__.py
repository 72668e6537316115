"""rlds-reverb: RLDS datasets to TF-Agents trajectories in Reverb tables, fast.

See `rlds_reverb.types` for what an RLDS dataset is here.
"""

from rlds_reverb.specs import create_trajectory_data_spec, get_rlds_step_features
from rlds_reverb.version import __version__

__all__ = [
    '__version__',
    'create_trajectory_data_spec',
    'get_rlds_step_features',
]
