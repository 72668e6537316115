"""A small dm_env environment of the tests' own, recorded by envlogger 1.2 (TFDS backend).

`PlanEnv` plays a fixed plan of episodes, each of a given number of environment steps and
ending either by termination (`dm_env.termination`, discount 0) or by truncation
(`dm_env.truncation`, discount 1). Everything is drawn from a seed, so the same plan and
actions give the same data. Observations are a dict:

    observation/image   uint8[8, 8, 3]   (written as a PNG `tfds.features.Image`)
    observation/state   float32[4]       [episode, t, noise, noise]: names each step's origin
                                         as `tests/item_references.py` reads it
    action              int64 in [0, 3)
    reward, discount    Python floats (dm_env's helpers), float64 in the dataset
    step_index          int64 step metadata (envlogger's step_fn): t
    step_energy         float32 step metadata: a seeded value per step
    episode_id          int64 episode metadata (envlogger's episode_fn): the plan index
    episode_return      float64 episode metadata: the return so far (the last value stays)

`record(directory, plan, ...)` drives the environment through envlogger's `EnvLogger` and
`TFDSBackendWriter` and returns what the environment produced, in RLDS form, built here
from the timesteps and actions as docs/semantics.md §1 reads them (not by envlogger's own
conversion): an episode of N environment steps is N + 1 RLDS steps; step t holds o_t, the
action taken at o_t, the reward and discount of the timestep it led to; the last step holds
o_N, placeholders (envlogger writes zeros: action 0, reward 0.0, discount 0.0, whatever the
ending) and `is_terminal` iff the episode terminated. dm_env's `reset` always starts with a
FIRST timestep that is not LAST, so the shortest RLDS episode envlogger writes has 2 steps.

Run as a program (`python -m tests.envlogger_env DIRECTORY`), it records `LONG_PLAN`,
`KILLED_EPISODES_PER_FILE` episodes a shard, never closing the logger, and prints
`episode <i> step <t>` when episode i reaches step `ANNOUNCE_AT`, then waits for a line on
stdin, so a test can copy the files or kill it mid-episode, knowing which episodes were
complete (envlogger hands episode i − 1 to TFDS'
writer when episode i starts).
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
from collections.abc import Sequence

import dm_env
import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds
from dm_env import specs

from rlds_reverb.core import types

NAME = 'plan_env'
VERSION = '1.0.0'
SPLIT = 'train'
IMAGE, STATE = 'image', 'state'
STEP_ENERGY, EPISODE_RETURN = 'step_energy', 'episode_return'
IMAGE_SHAPE = (8, 8, 3)
STATE_SIZE = 4
NUM_ACTIONS = 3
TERMINATED, TRUNCATED = 'terminated', 'truncated'


@dataclasses.dataclass(frozen=True)
class EpisodePlan:
    """One episode: how many environment steps (>= 1) and how it ends."""

    num_env_steps: int
    ending: str  # TERMINATED or TRUNCATED


# Lengths 1 to 300 environment steps (2 to 301 RLDS steps), both endings, each length once
# with each ending where it matters.
PLAN = (
    EpisodePlan(1, TERMINATED),
    EpisodePlan(1, TRUNCATED),
    EpisodePlan(2, TERMINATED),
    EpisodePlan(7, TRUNCATED),
    EpisodePlan(300, TERMINATED),
    EpisodePlan(13, TERMINATED),
    EpisodePlan(250, TRUNCATED),
    EpisodePlan(3, TRUNCATED),
    EpisodePlan(40, TERMINATED),
    EpisodePlan(1, TERMINATED),
    EpisodePlan(64, TRUNCATED),
)
# The killed recording: long episodes, so the kill lands mid-episode.
KILLED_EPISODES_PER_FILE = 4
ANNOUNCE_AT = 100
LONG_PLAN = tuple(EpisodePlan(200 + 10 * i, (TERMINATED, TRUNCATED)[i % 2]) for i in range(40))


def rlds_length(plan: EpisodePlan) -> int:
    """The RLDS steps of an episode of `plan.num_env_steps` environment steps."""
    return plan.num_env_steps + 1


class PlanEnv(dm_env.Environment):
    """Plays `plan`'s episodes in turn (then from the start again), seeded by `seed`."""

    def __init__(self, plan: Sequence[EpisodePlan], *, seed: int = 0):
        self._plan = tuple(plan)
        self._rng = np.random.default_rng(seed)
        self._episode = -1
        self._t = 0

    @property
    def episode(self) -> int:
        """The index of the current episode in the plan (repeats counted on)."""
        return self._episode

    @property
    def t(self) -> int:
        """The index of the current timestep in the episode (0 after reset)."""
        return self._t

    def _observation(self) -> dict:
        noise = self._rng.standard_normal(STATE_SIZE - 2)
        state = np.concatenate([[self._episode, self._t], noise]).astype(np.float32)
        image = self._rng.integers(0, 256, size=IMAGE_SHAPE, dtype=np.uint8)
        return {IMAGE: image, STATE: state}

    def reset(self) -> dm_env.TimeStep:
        self._episode += 1
        self._t = 0
        return dm_env.restart(self._observation())

    def step(self, action) -> dm_env.TimeStep:
        if not 0 <= int(action) < NUM_ACTIONS:
            raise ValueError(f'action {action!r} is outside [0, {NUM_ACTIONS}).')
        self._t += 1
        plan = self._plan[self._episode % len(self._plan)]
        reward = float(np.round(self._rng.normal() + int(action), 3))  # A Python float.
        observation = self._observation()
        if self._t < plan.num_env_steps:
            return dm_env.transition(reward, observation)
        if plan.ending == TERMINATED:
            return dm_env.termination(reward, observation)
        return dm_env.truncation(reward, observation)

    def observation_spec(self) -> dict:
        return {
            IMAGE: specs.BoundedArray(IMAGE_SHAPE, np.uint8, 0, 255, name=IMAGE),
            STATE: specs.Array((STATE_SIZE,), np.float32, name=STATE),
        }

    def action_spec(self) -> specs.DiscreteArray:
        return specs.DiscreteArray(NUM_ACTIONS, dtype=np.int64, name='action')


def dataset_config() -> tfds.rlds.rlds_base.DatasetConfig:
    """The TFDS `DatasetConfig` envlogger writes `PlanEnv` with (float64 reward/discount)."""
    return tfds.rlds.rlds_base.DatasetConfig(
        name=NAME,
        observation_info=tfds.features.FeaturesDict(
            {
                IMAGE: tfds.features.Image(shape=IMAGE_SHAPE, dtype=np.uint8),
                STATE: tfds.features.Tensor(shape=(STATE_SIZE,), dtype=np.float32),
            }
        ),
        action_info=tf.int64,
        reward_info=tf.float64,
        discount_info=tf.float64,
        step_metadata_info={types.STEP_INDEX: tf.int64, STEP_ENERGY: tf.float32},
        episode_metadata_info={types.EPISODE_ID: tf.int64, EPISODE_RETURN: tf.float64},
    )


def _step_fn(timestep: dm_env.TimeStep, action, env: PlanEnv) -> dict:
    del timestep, action
    energy = np.float32(np.sin(env.episode + 0.1 * env.t))
    return {types.STEP_INDEX: np.int64(env.t), STEP_ENERGY: energy}


class _EpisodeFn:
    """envlogger's episode_fn: the episode id and its return so far (the last call stays)."""

    def __init__(self):
        self._return = 0.0

    def __call__(self, timestep: dm_env.TimeStep, action, env: PlanEnv) -> dict:
        del action
        self._return = 0.0 if timestep.first() else self._return + timestep.reward
        return {types.EPISODE_ID: np.int64(env.episode), EPISODE_RETURN: self._return}


class _Recorder:
    """Builds the RLDS episodes (NumPy) from the timesteps and actions, as they happen."""

    def __init__(self):
        self.episodes: list[dict] = []
        self._timesteps: list[dm_env.TimeStep] = []
        self._actions: list[int] = []
        self._metadata: list[dict] = []

    def add(self, timestep: dm_env.TimeStep, action, metadata: dict) -> None:
        if timestep.first():
            self._timesteps, self._actions, self._metadata = [], [], []
        else:
            self._actions.append(int(action))
        self._timesteps.append(timestep)
        self._metadata.append(metadata)
        if timestep.last():
            self.episodes.append(self._finish())

    def _finish(self) -> dict:
        timesteps, size = self._timesteps, len(self._timesteps)
        later = timesteps[1:]
        terminated = timesteps[-1].discount == 0.0
        steps = {
            types.OBSERVATION: {
                key: np.stack([ts.observation[key] for ts in timesteps]) for key in (IMAGE, STATE)
            },
            types.ACTION: np.array([*self._actions, 0], np.int64),
            types.REWARD: np.array([ts.reward for ts in later] + [0.0], np.float64),
            types.DISCOUNT: np.array([ts.discount for ts in later] + [0.0], np.float64),
            types.IS_FIRST: np.arange(size) == 0,
            types.IS_LAST: np.arange(size) == size - 1,
            types.IS_TERMINAL: (np.arange(size) == size - 1) & terminated,
            types.STEP_INDEX: np.array([m[types.STEP_INDEX] for m in self._metadata], np.int64),
            STEP_ENERGY: np.array([m[STEP_ENERGY] for m in self._metadata], np.float32),
        }
        episode_id = int(timesteps[0].observation[STATE][0])
        episode_return = sum(float(ts.reward) for ts in later)  # In episode_fn's order.
        return {
            types.STEPS: steps,
            types.EPISODE_ID: np.int64(episode_id),
            EPISODE_RETURN: np.float64(episode_return),
        }


def make_logger(directory: pathlib.Path | str, env: PlanEnv, *, max_episodes_per_file: int):
    """Returns `env` wrapped in envlogger's `EnvLogger` writing RLDS into `directory`."""
    import envlogger  # Needs libgmp (Debian's libgmp10, libgmpxx4ldbl).
    from envlogger.backends import tfds_backend_writer

    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    backend = tfds_backend_writer.TFDSBackendWriter(
        data_directory=str(directory),
        ds_config=dataset_config(),
        max_episodes_per_file=max_episodes_per_file,
        split_name=SPLIT,
        version=VERSION,
    )
    return envlogger.EnvLogger(env, step_fn=_step_fn, episode_fn=_EpisodeFn(), backend=backend)


def run_episode(
    env: dm_env.Environment,
    inner: PlanEnv,
    rng: np.random.Generator,
    recorder: _Recorder,
    *,
    announce_at: int | None = None,
) -> None:
    """Plays one episode of seeded random actions, noting each timestep in `recorder`.

    Prints `episode <i> step <t>` (flushed) once the episode reaches `announce_at`, then
    waits for a line on stdin.
    """
    timestep = env.reset()
    recorder.add(timestep, None, _step_fn(timestep, None, inner))
    while not timestep.last():
        action = int(rng.integers(NUM_ACTIONS))
        timestep = env.step(action)
        recorder.add(timestep, action, _step_fn(timestep, action, inner))
        if inner.t == announce_at:
            print(f'episode {inner.episode} step {inner.t}', flush=True)
            sys.stdin.readline()  # Waits for the test: to copy the files, or to kill.


def record(
    directory: pathlib.Path | str,
    plan: Sequence[EpisodePlan] = PLAN,
    *,
    seed: int = 0,
    max_episodes_per_file: int = 3,
) -> list[dict]:
    """Records `plan` with envlogger into `directory`; returns the episodes it produced.

    Returns:
      The RLDS episodes (NumPy) in recording order: `steps` `[T, ...]` per field, and the
      episode metadata fields.
    """
    rng = np.random.default_rng(seed + 1)
    recorder = _Recorder()
    inner = PlanEnv(plan, seed=seed)
    with make_logger(directory, inner, max_episodes_per_file=max_episodes_per_file) as env:
        for _ in plan:
            run_episode(env, inner, rng, recorder)
    return recorder.episodes


def _record_until_killed(directory: str) -> None:
    """Records `LONG_PLAN` (`KILLED_EPISODES_PER_FILE` a shard), announcing each half-way point.

    Never closes the logger: the test that runs it kills it.
    """
    rng = np.random.default_rng(1)
    recorder = _Recorder()
    inner = PlanEnv(LONG_PLAN, seed=0)
    env = make_logger(directory, inner, max_episodes_per_file=KILLED_EPISODES_PER_FILE)
    for _ in LONG_PLAN:
        run_episode(env, inner, rng, recorder, announce_at=ANNOUNCE_AT)


if __name__ == '__main__':
    _record_until_killed(sys.argv[1])
