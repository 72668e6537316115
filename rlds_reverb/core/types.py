"""The vocabulary: RLDS field names, our added field names, type aliases and enums.

Every module names step fields through this module; no bare field strings elsewhere.

Throughout the package, an *RLDS dataset* is a `tf.data.Dataset` of episodes. Each
episode is a dict holding `steps`, itself a `tf.data.Dataset` of step dicts with
`observation`, `action`, `reward`, `discount`, `is_first`, `is_last`, `is_terminal` and
possibly more fields (step metadata). Step t holds o_t, the action a_t taken at o_t, the
reward r_t received for it and the discount d_t of that transition. `is_terminal` on the
last step means o_L is terminal; `is_last` without `is_terminal` means truncation.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

__all__ = [
    'ACTION',
    'ADVANTAGE',
    'CHUNK_IS_PAD',
    'CHUNK_IS_TERMINATED',
    'CHUNK_IS_TRUNCATED',
    'CameraMode',
    'DATA_VERSION',
    'DISCOUNT',
    'EPISODE_ID',
    'EPISODE_INDEX',
    'EndBehavior',
    'Episode',
    'EpisodeOverflow',
    'ExtraFields',
    'FLAG_FIELDS',
    'FinalAction',
    'GOAL',
    'GOAL_OFFSET',
    'GOAL_REACHED',
    'GoalStrategy',
    'FRAME_PRESENT_SUFFIX',
    'HISTORY_IS_PAD',
    'FPS',
    'IS_BURN_IN',
    'IS_FIRST',
    'IS_LAST',
    'IS_TERMINAL',
    'ItemName',
    'LANGUAGE_INSTRUCTION',
    'MASK',
    'NEXT_OBSERVATION',
    'N_STEP_DISCOUNT',
    'N_STEP_LENGTH',
    'N_STEP_RETURN',
    'Nest',
    'OBSERVATION',
    'POLICY_INFO',
    'PadFill',
    'REQUIRED_STEP_FIELDS',
    'RETURN',
    'REWARD',
    'STEPS',
    'STEP_INDEX',
    'TIMESTAMP',
    'SpecNest',
    'Step',
    'TablePreset',
    'VALUE',
    'ValidationMode',
]

# RLDS' own names (the values of `rlds.STEPS`... , checked by tests/system/test_startup.py), spelled
# out so that this module, and the command line's parser which needs its enums, load
# without importing RLDS and TensorFlow.
STEPS: str = 'steps'
OBSERVATION: str = 'observation'
ACTION: str = 'action'
REWARD: str = 'reward'
DISCOUNT: str = 'discount'
IS_FIRST: str = 'is_first'
IS_LAST: str = 'is_last'
IS_TERMINAL: str = 'is_terminal'

# Fields this toolkit adds to steps.
N_STEP_RETURN = 'n_step_return'
N_STEP_DISCOUNT = 'n_step_discount'
N_STEP_LENGTH = 'n_step_length'
NEXT_OBSERVATION = 'next_observation'
ADVANTAGE = 'advantage'
RETURN = 'return'
VALUE = 'value'
MASK = 'mask'
IS_BURN_IN = 'is_burn_in'
DATA_VERSION = 'data_version'
# Added to every step by `push(..., add_ids=True)` (rlds_reverb.transform.carry).
EPISODE_ID = 'episode_id'
STEP_INDEX = 'step_index'
# The natural-language instruction of a step (Open X-Embodiment's name; LeRobot's task).
LANGUAGE_INSTRUCTION = 'language_instruction'
# What the LeRobot reader adds (docs/lerobot.md): episode fields, the time of each step.
EPISODE_INDEX = 'episode_index'
FPS = 'fps'
TIMESTAMP = 'timestamp'
# The step field of a TF-Agents policy info that is not a dict (recorder, export).
POLICY_INFO = 'policy_info'
# Added by `adders.chunks` (docs/semantics.md §12): true where a window position holds no
# real data (before the episode's start; past its last real action, by time limit or by
# termination).
HISTORY_IS_PAD = 'history_is_pad'
CHUNK_IS_PAD = 'chunk_is_pad'
CHUNK_IS_TRUNCATED = 'chunk_is_truncated'
CHUNK_IS_TERMINATED = 'chunk_is_terminated'
# Added by `adders.relabel_goals` (docs/semantics.md §13).
GOAL = 'goal'
GOAL_OFFSET = 'goal_offset'
GOAL_REACHED = 'goal_reached'
# The mask a frame decode adds beside a frame field (`rlds_reverb.transform.frames`):
# `observation/image` decoded gains `observation/image_present`, false where the step
# stored no frame (an empty string: a missing camera) and the frame is zeros.
FRAME_PRESENT_SUFFIX = '_present'

# The step fields every RLDS step must hold, in TF-Agents' order.
REQUIRED_STEP_FIELDS: tuple[str, ...] = (
    OBSERVATION,
    ACTION,
    REWARD,
    DISCOUNT,
    IS_FIRST,
    IS_LAST,
    IS_TERMINAL,
)
FLAG_FIELDS: tuple[str, ...] = (IS_FIRST, IS_LAST, IS_TERMINAL)

# Type aliases. A nest is a (possibly nested) dict/tuple/list of tensors or arrays.
Nest = Any
Step = dict[str, Any]
Episode = dict[str, Any]
SpecNest = Any

# Progress callbacks, the two kinds the package calls.
# `fn(episodes, steps)`: after each episode written (push, seed, export), with the
# episodes (1) and steps it added.
EpisodeProgressFn = Callable[[int, int], None]
# `fn(items)`: now and then while a Beam push runs, with the items the servers gained so far.
ItemProgressFn = Callable[[int], None]


class ValidationMode(enum.Enum):
    """What to do with an invalid episode: the `on_invalid=` option of every function.

    `validate`, `convert_rlds_to_trajectories`, `push`, `seed_server` and the command line
    (`--on-invalid`) all take it under that one name.

    RAISE: raise `InvalidEpisodeError` at the first invalid episode, naming all of its problems.
    SKIP: drop invalid episodes (never partly), count and report them.
    REPORT: return the full report; convert nothing (`validate` only).
    """

    RAISE = 'raise'
    SKIP = 'skip'
    REPORT = 'report'


class CameraMode(enum.Enum):
    """How a LeRobot dataset stores camera frames: `save_as_lerobot(cameras=...)`, `--video`.

    IMAGE: PNG images in the data files (lossless; LeRobot's image mode).
    VIDEO: AV1 video, many episodes per mp4 file (lossy; LeRobot's video mode).
    """

    IMAGE = 'image'
    VIDEO = 'video'


class ExtraFields(enum.Enum):
    """What two-step trajectories do with extra step fields (fields beyond the required seven).

    One switch, `extra_fields=`, shared by `create_trajectory_data_spec`,
    `convert_rlds_to_trajectories`, `push_rlds_to_reverb` and `items.TwoStep`, so that the
    spec, the converter and a push cannot disagree (docs/semantics.md §3).

    DROP: drop them, as TF-Agents does (the default of the TF-Agents drop-in functions).
    POLICY_INFO: carry them as `policy_info`, a dict sorted by name (the default of
        `items.TwoStep`, so `push(item=...)` keeps every field). A `policy_info_fn` wins
        over either.
    """

    DROP = 'drop'
    POLICY_INFO = 'policy_info'


class EndBehavior(enum.Enum):
    """What a sequence splitter does at the end of an episode (docs/semantics.md §6).

    Each value is drawn for an episode of 7 steps (0..6), `length=3`, `period=3`:

    TRUNCATE: the last window is shorter.
        `[0 1 2] [3 4 5] [6]`
    PAD: the last window is padded with null steps (zeros, `mask` false).
        `[0 1 2] [3 4 5] [6 _ _]`
    DROP: the residual steps start no window.
        `[0 1 2] [3 4 5]`
    LAST: the last window is the last `length` steps, overlapping the one before
        (padded when the episode is shorter than `length`).
        `[0 1 2] [3 4 5] [4 5 6]`
    CONTINUE: windows cross into the next episode (its first step has `is_first`).
        `[0 1 2] [3 4 5] [6 0' 1'] ...`
    """

    TRUNCATE = 'truncate'
    PAD = 'pad'
    DROP = 'drop'
    LAST = 'last'
    CONTINUE = 'continue'


class FinalAction(enum.Enum):
    """Whether the action of an episode's last step is data (docs/semantics.md §12).

    RLDS says the action of a step with `is_last` is not meaningful (o_L is where the
    episode ends: no action is taken there); robot datasets often record one anyway, and
    Octo and LeRobot train on it. For an episode of 4 steps (L = 3), chunks of 3 actions:

    IGNORED: RLDS' definition (the default): the last real action is a_{L-1}; a chunk
        position past it is padding. Step 2's chunk: `[a2 + +]`; step 3's: `[+ + +]`.
    RECORDED: the last step's action is real (Octo, LeRobot); the last real action is
        a_L. Step 2's chunk: `[a2 a3 +]`; step 3's: `[a3 + +]`.
    """

    IGNORED = 'ignored'
    RECORDED = 'recorded'


class PadFill(enum.Enum):
    """What a padded window position holds (docs/semantics.md §12); its mask says it is padding.

    EDGE: the nearest real value: o_0 before the episode's start, the last real action
        after its end (as Octo and LeRobot fill them).
    ZERO: zeros (empty strings for `tf.string` leaves).
    """

    EDGE = 'edge'
    ZERO = 'zero'


class GoalStrategy(enum.Enum):
    """Which future step gives a step its relabeled goal (docs/semantics.md §13).

    FUTURE: uniform over the steps after t (t + 1 .. L).
    GEOMETRIC: t + k with k ~ Geometric(p) on {1, 2, ...}: past a terminal end the mass
        stays on o_L (a terminal state is absorbing); a truncated episode's unrecorded
        future is left out (k conditioned on t + k <= L).
    The last step, with no future, is its own goal (offset 0).
    """

    FUTURE = 'future'
    GEOMETRIC = 'geometric'


class EpisodeOverflow(enum.Enum):
    """What `Episode(max_length)` does with an episode longer than `max_length`.

    ERROR: raise `EpisodeTooLongError` before writing the episode (the default).
    SPLIT: write it as consecutive `max_length` chunks, the last one padded.
    TRUNCATE: write its first `max_length` steps only.
    """

    ERROR = 'error'
    SPLIT = 'split'
    TRUNCATE = 'truncate'


class ItemName(enum.Enum):
    """The item kinds by the names the command line and `parse_item` take."""

    TWO_STEP = 'two-step'
    N_STEP = 'n-step'
    SEQUENCE = 'sequence'
    EPISODE = 'episode'


class TablePreset(enum.Enum):
    """The table presets of `make_table`, the seeding functions and `rlds-reverb serve`."""

    UNIFORM = 'uniform'
    PRIORITIZED = 'prioritized'
    FIFO = 'fifo'


def as_enum(enum_type: type[enum.Enum], value: Any, *, argument: str) -> Any:
    """Returns `value` as a member of `enum_type`, accepting members, names and values.

    Args:
      enum_type: The enum class.
      value: A member, its name (any case) or its value.
      argument: The argument name, for the error message.

    Returns:
      The enum member.

    Raises:
      ValueError: If `value` names no member; the message lists the valid ones.
    """
    if isinstance(value, enum_type):
        return value
    for member in enum_type:
        if isinstance(value, str) and value.lower() in (member.value, member.name.lower()):
            return member
    valid = ', '.join(repr(m.value) for m in enum_type)
    raise ValueError(f'{argument}={value!r} is not valid; expected one of {valid}.')
