"""Adders: per-episode transforms of RLDS datasets, each a `dataset -> dataset` function.

Every public transform is a factory; apply its result to an RLDS dataset (see
`rlds_reverb.core.types`) with `tf.data.Dataset.apply`:

    episodes.apply(adders.n_step(3, 0.99))
    episodes.apply(adders.gae(0.99, 0.95, value_fn=critic)).apply(adders.sequences(64))

A transform keeps every step field and adds its own, working on whole `[T, ...]` episode
tensors. It also accepts the faster episode-tensor form
(`rlds_reverb.core.episodes.to_episode_tensors`) and returns the form it was given.

| transform | adds |
| --- | --- |
| `n_step(n, gamma)` | `n_step_return`, `n_step_discount`, `next_observation`, `n_step_length` |
| `gae(gamma, lambda_, value_fn=, value_field=)` | `advantage`, `return`, `value` |
| `sequences(length, period, end=, burn_in=)` | windows with `mask`, `is_burn_in` |
| `stack_frames(k)` | observation -> `[k, ...]` stack |
| `chunks(history, horizon)` | observation -> `[W, ...]`, action -> `[H, ...]`, four masks |
| `relabel_goals(strategy, p=, seed=)` | `goal`, `goal_offset` (`reward`, `goal_reached`) |
| `to_dqn_transitions()` | TF-Agents `Transition`s for `DqnAgent(n_step_update=n)` |
"""

from adders.chunks import ChunkOptions, chunks, fill_padding
from adders.gae import add_gae_fields, gae
from adders.goals import GoalOptions, relabel_goals
from adders.nstep import add_n_step_fields, n_step
from adders.sequences import sequences
from adders.stacking import stack_frames, stack_observations
from adders.transitions import to_dqn_transitions
from rlds_reverb.core.types import EndBehavior

__all__ = [
    'ChunkOptions',
    'EndBehavior',
    'GoalOptions',
    'add_gae_fields',
    'add_n_step_fields',
    'chunks',
    'fill_padding',
    'gae',
    'n_step',
    'relabel_goals',
    'sequences',
    'stack_frames',
    'stack_observations',
    'to_dqn_transitions',
]
