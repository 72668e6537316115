"""The embedded default dataset: CartPole-v1 episodes of mixed quality, in RLDS/TFDS format.

A scripted controller (a linear rule on cart position, cart velocity, pole angle and pole
angular velocity, which balances the pole for 500 steps on its own) acts in
`gym.make('CartPole-v1')`; in each episode a fraction of its actions, drawn per episode, is
replaced by uniformly random ones. Episodes with little noise reach the 500-step time limit
(truncated); noisy ones drop the pole early (terminated), so returns are mixed.

Step semantics (docs/semantics.md §1). An episode of N environment steps has N + 1 RLDS steps:

* step t < N: `observation` o_t, `action` a_t (int64, 0 or 1), `reward` r_t (1.0),
  `discount` d_t of that transition: 1.0, but 0.0 on step N - 1 of a terminated episode
  (the transition into the terminal state, as dm_env and envlogger record it, so that
  TF-Agents' two-step trajectories do not bootstrap from a terminal state); `is_first`
  only at t = 0.
* step N (the last): the final observation o_N, `is_last` true, placeholders action 0,
  reward 0.0, discount 0.0 if terminated else 1.0, and `is_terminal` true iff the pole fell
  (or the cart left the track) rather than the time limit ending the episode.

So a truncated episode of the default 500-step limit has 501 steps, and an episode's return
(the sum of its rewards) is N. Episode-level fields: `episode_return` (float32) and
`random_action_fraction` (float32, the fraction used for that episode).

Example:
  >>> path = ensure_default_dataset()
  >>> episodes = rlds_reverb.load(path)
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from collections.abc import Iterator
from typing import Any, cast

import numpy as np
import tensorflow_datasets as tfds

from rlds_reverb.core import checks, files, types
from rlds_reverb.storage import tfds_writer

__all__ = [
    'DATA_DIR_ENV',
    'DEFAULT_NUM_EPISODES',
    'DEFAULT_RANDOM_ACTION_FRACTION',
    'ENV_ID',
    'EPISODE_RETURN',
    'NAME',
    'RANDOM_ACTION_FRACTION',
    'VERSION',
    'dataset_dir',
    'default_data_dir',
    'ensure_default_dataset',
    'generate',
    'is_complete',
    'make_features',
    'read_stats',
    'simulate_episodes',
]

NAME = 'cartpole_v1'
VERSION = '1.0.0'
ENV_ID = 'CartPole-v1'
DATA_DIR_ENV = 'RLDS_REVERB_DATA_DIR'
EPISODE_RETURN = 'episode_return'
RANDOM_ACTION_FRACTION = 'random_action_fraction'
DEFAULT_NUM_EPISODES = 250
# Per-episode fraction of random actions, drawn uniformly from this range.
DEFAULT_RANDOM_ACTION_FRACTION = (0.0, 0.8)
DESCRIPTION = (
    'CartPole-v1 episodes of a scripted controller with a per-episode fraction of random '
    'actions: a mix of terminated and truncated (500-step) episodes.'
)
_METADATA_ARGS = 'generator_args'
_METADATA_STATS = 'stats'

# Gains of the controller: push right when K . (x, x_dot, theta, theta_dot) > 0.
CONTROLLER_GAINS = np.array([0.1, 0.5, 10.0, 2.0])


@dataclasses.dataclass(frozen=True)
class _Rollout:
    """One environment episode: N + 1 observations and N actions."""

    observations: np.ndarray  # float32[N + 1, 4]
    actions: np.ndarray  # int64[N]
    terminated: bool
    random_action_fraction: float


def _make_env(max_episode_steps: int) -> Any:
    """Returns CartPole-v1 with the given time limit (gym 0.23 API)."""
    import gym  # Imported lazily: gym prints a deprecation notice on import.

    env = gym.make(ENV_ID)
    if max_episode_steps != env.spec.max_episode_steps:
        env = gym.wrappers.TimeLimit(env.env, max_episode_steps=max_episode_steps)
    return env


def _draw_fractions(
    rng: np.random.Generator, num_episodes: int, random_action_fraction: float | tuple[float, float]
) -> np.ndarray:
    """Returns each episode's random-action fraction (fixed, or uniform in a range)."""
    # np.isscalar (NumPy scalars count) is no type guard: the casts say what it decided.
    if np.isscalar(random_action_fraction):
        low = high = cast(float, random_action_fraction)
    else:
        low, high = cast(tuple[float, float], random_action_fraction)
    if not 0.0 <= low <= high <= 1.0:
        raise ValueError(
            f'random_action_fraction={random_action_fraction!r} must be a fraction in [0, 1] '
            'or a (low, high) range with 0 <= low <= high <= 1.'
        )
    return rng.uniform(low, high, size=num_episodes)


def _run_episode(
    env: Any, rng: np.random.Generator, fraction: float, max_episode_steps: int
) -> _Rollout:
    """Runs one episode of the noisy controller; random draws are made up front."""
    env_seed = int(rng.integers(2**31 - 1))
    explore = rng.random(max_episode_steps) < fraction
    random_actions = rng.integers(0, 2, size=max_episode_steps)
    observations = [env.reset(seed=env_seed)]
    actions: list[int] = []
    done, info = False, {}
    while not done:
        t = len(actions)
        action = (
            int(random_actions[t]) if explore[t] else int(CONTROLLER_GAINS @ observations[-1] > 0)
        )
        observation, _, done, info = env.step(action)
        observations.append(observation)
        actions.append(action)
    return _Rollout(
        observations=np.asarray(observations, dtype=np.float32),
        actions=np.asarray(actions, dtype=np.int64),
        terminated=not info.get('TimeLimit.truncated', False),
        random_action_fraction=float(fraction),
    )


def _to_rlds_episode(rollout: _Rollout) -> dict[str, Any]:
    """Returns the RLDS episode of a rollout (see the module docstring for the semantics)."""
    n = len(rollout.actions)
    is_last = np.arange(n + 1) == n
    last_discount = 0.0 if rollout.terminated else 1.0
    discounts = np.append(np.ones(n, np.float32), last_discount).astype(np.float32)
    if rollout.terminated and n:
        discounts[n - 1] = 0.0
    steps = {
        types.OBSERVATION: rollout.observations,
        types.ACTION: np.append(rollout.actions, 0).astype(np.int64),
        types.REWARD: np.append(np.ones(n, np.float32), 0.0).astype(np.float32),
        types.DISCOUNT: discounts,
        types.IS_FIRST: np.arange(n + 1) == 0,
        types.IS_LAST: is_last,
        types.IS_TERMINAL: is_last & rollout.terminated,
    }
    return {
        types.STEPS: steps,
        EPISODE_RETURN: np.float32(n),
        RANDOM_ACTION_FRACTION: np.float32(rollout.random_action_fraction),
    }


def simulate_episodes(
    *,
    num_episodes: int = DEFAULT_NUM_EPISODES,
    random_action_fraction: float | tuple[float, float] = DEFAULT_RANDOM_ACTION_FRACTION,
    seed: int = 0,
    max_episode_steps: int = 500,
) -> Iterator[dict[str, Any]]:
    """Yields CartPole RLDS episodes as dicts of NumPy arrays (deterministic for a seed).

    Args:
      num_episodes: How many episodes to run.
      random_action_fraction: The fraction of random actions per step, fixed, or a
        `(low, high)` range that each episode's fraction is drawn from uniformly.
      seed: Seeds the NumPy generator, which seeds every `env.reset`.
      max_episode_steps: The time limit (CartPole-v1's own is 500).

    Yields:
      `{'steps': {field: array}, 'episode_return': ..., 'random_action_fraction': ...}`.

    Raises:
      ValueError: If an argument is out of range.

    Example:
      >>> returns = [e['episode_return'] for e in simulate_episodes(num_episodes=5)]
    """
    checks.check_int_at_least(num_episodes, 0, argument='num_episodes')
    checks.check_int_at_least(max_episode_steps, 1, argument='max_episode_steps')
    rng = np.random.default_rng(seed)
    fractions = _draw_fractions(rng, num_episodes, random_action_fraction)
    env = _make_env(max_episode_steps)
    try:
        for fraction in fractions:
            yield _to_rlds_episode(_run_episode(env, rng, fraction, max_episode_steps))
    finally:
        env.close()


def make_features() -> tfds.features.FeaturesDict:
    """Returns the TFDS features of the CartPole RLDS dataset."""
    scalar = tfds.features.Scalar
    steps = {
        types.OBSERVATION: tfds.features.Tensor(shape=(4,), dtype=np.float32),
        types.ACTION: scalar(dtype=np.int64),
        types.REWARD: scalar(dtype=np.float32),
        types.DISCOUNT: scalar(dtype=np.float32),
    }
    episode = {EPISODE_RETURN: scalar(np.float32), RANDOM_ACTION_FRACTION: scalar(np.float32)}
    return tfds_writer.make_rlds_features(steps, episode)


def _summarize(episodes: list[dict[str, Any]]) -> dict[str, Any]:
    """Returns the dataset's counts and mean return, stored in its metadata."""
    returns = np.array([e[EPISODE_RETURN] for e in episodes], dtype=np.float64)
    terminated = sum(bool(e[types.STEPS][types.IS_TERMINAL][-1]) for e in episodes)
    return {
        'num_episodes': len(episodes),
        'num_steps': int(sum(len(e[types.STEPS][types.IS_FIRST]) for e in episodes)),
        'num_terminated': terminated,
        'num_truncated': len(episodes) - terminated,
        'mean_return': float(returns.mean()) if len(returns) else 0.0,
    }


def dataset_dir(data_dir: os.PathLike | str) -> pathlib.Path:
    """Returns where `generate(data_dir)` writes: `data_dir/cartpole_v1/1.0.0`."""
    return pathlib.Path(data_dir).expanduser().absolute() / NAME / VERSION


def generate(
    data_dir: os.PathLike | str,
    *,
    num_episodes: int = DEFAULT_NUM_EPISODES,
    random_action_fraction: float | tuple[float, float] = DEFAULT_RANDOM_ACTION_FRACTION,
    seed: int = 0,
    max_episode_steps: int = 500,
    episodes_per_shard: int = 100,
) -> pathlib.Path:
    """Writes the CartPole-v1 RLDS dataset in TFDS format under `data_dir`.

    The dataset goes to `data_dir/cartpole_v1/1.0.0` (TFDS' `name/version` layout, so that
    `load('cartpole_v1', data_dir=data_dir)` finds it too), replacing what was there once
    the new one is complete. The same arguments give the same bytes. `metadata.json` holds
    the arguments and the counts (episodes, steps, terminated, truncated, mean return).

    Args:
      data_dir: The TFDS data directory.
      num_episodes: How many episodes to write.
      random_action_fraction: The fraction of random actions per step, fixed, or a
        `(low, high)` range that each episode's fraction is drawn from uniformly.
      seed: The seed of every random draw (actions and environment resets).
      max_episode_steps: The time limit (CartPole-v1's own is 500).
      episodes_per_shard: Episodes per TFRecord shard.

    Returns:
      The dataset directory, which `rlds_reverb.load` and `tfds.builder_from_directory` open.

    Raises:
      ValueError: If an argument is out of range.

    Example:
      >>> path = generate('/tmp/data', num_episodes=20, seed=1)
      >>> episodes = rlds_reverb.load(path)
    """
    args = {
        'num_episodes': num_episodes,
        'random_action_fraction': random_action_fraction,
        'seed': seed,
        'max_episode_steps': max_episode_steps,
        'episodes_per_shard': episodes_per_shard,
    }
    episodes = list(
        simulate_episodes(
            num_episodes=num_episodes,
            random_action_fraction=random_action_fraction,
            seed=seed,
            max_episode_steps=max_episode_steps,
        )
    )
    return tfds_writer.write_rlds_dataset(
        dataset_dir(data_dir),
        episodes,
        features=make_features(),
        name=NAME,
        version=VERSION,
        description=DESCRIPTION,
        metadata={_METADATA_ARGS: _jsonable(args), _METADATA_STATS: _summarize(episodes)},
        episodes_per_shard=episodes_per_shard,
    )


def _jsonable(args: dict[str, Any]) -> dict[str, Any]:
    """Returns `args` as they read back from JSON (tuples become lists)."""
    return json.loads(json.dumps(args))


def read_stats(path: os.PathLike | str) -> dict[str, Any]:
    """Returns the counts `generate` stored in the dataset's `metadata.json`.

    Args:
      path: A directory written by `generate`.

    Returns:
      `{'num_episodes', 'num_steps', 'num_terminated', 'num_truncated', 'mean_return'}`.

    Raises:
      FileNotFoundError: If `path` holds no `metadata.json`.

    Example:
      >>> read_stats(ensure_default_dataset())['mean_return']
    """
    return _read_metadata(pathlib.Path(path))[_METADATA_STATS]


def _read_metadata(path: pathlib.Path) -> dict[str, Any]:
    return json.loads((path / 'metadata.json').read_text())


def default_data_dir() -> pathlib.Path:
    """Returns the default data directory: `$RLDS_REVERB_DATA_DIR`, else `~/.cache/rlds_reverb`."""
    override = os.environ.get(DATA_DIR_ENV)
    base: str | pathlib.Path = (
        override if override else pathlib.Path.home() / '.cache' / 'rlds_reverb'
    )
    return pathlib.Path(base).expanduser().absolute()


def is_complete(path: os.PathLike | str, *, expected_args: dict[str, Any] | None = None) -> bool:
    """Returns whether `path` holds a complete dataset written by `generate`.

    Complete means: `dataset_info.json` and `metadata.json` exist (written last), every
    shard named by the split exists with the size its records need, and, if given, the
    stored generator arguments equal `expected_args`.

    Args:
      path: The dataset directory.
      expected_args: The `generate` keyword arguments it must have been written with.

    Returns:
      True if the dataset can be reused as is.
    """
    path = pathlib.Path(path)
    try:
        metadata = _read_metadata(path)
        info = json.loads((path / 'dataset_info.json').read_text())
    except (OSError, ValueError):
        return False
    if expected_args is not None and metadata.get(_METADATA_ARGS) != _jsonable(expected_args):
        return False
    splits = [s for s in info.get('splits', []) if s.get('name') == tfds_writer.SPLIT]
    if len(splits) != 1:
        return False
    split = splits[0]
    lengths = [int(n) for n in split.get('shardLengths', [])]
    shards = sorted(path.glob(f'{NAME}-{tfds_writer.SPLIT}.{tfds_writer.FILE_FORMAT}-*'))
    expected_bytes = int(split.get('numBytes', 0)) + tfds_writer.TFRECORD_OVERHEAD * sum(lengths)
    return len(shards) == len(lengths) and sum(s.stat().st_size for s in shards) == expected_bytes


def ensure_default_dataset(*, data_dir: os.PathLike | str | None = None) -> pathlib.Path:
    """Returns the default CartPole dataset, generating it on first use.

    The dataset is reused when complete and written with the current defaults; a missing,
    half-written or outdated one is (re)generated.

    Args:
      data_dir: The data directory; `default_data_dir()` if None (created 0700 if missing).

    Returns:
      The dataset directory, ready for `rlds_reverb.load`.

    Example:
      >>> episodes = rlds_reverb.load(ensure_default_dataset())
    """
    if data_dir is None:  # The toolkit's own cache: private (README, Security).
        data_dir = files.make_private_dirs(default_data_dir())
    path = dataset_dir(data_dir)
    defaults: dict[str, Any] = {
        'num_episodes': DEFAULT_NUM_EPISODES,
        'random_action_fraction': DEFAULT_RANDOM_ACTION_FRACTION,
        'seed': 0,
        'max_episode_steps': 500,
        'episodes_per_shard': 100,
    }
    if is_complete(path, expected_args=defaults):
        return path
    return generate(data_dir, **defaults)
