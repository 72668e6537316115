"""Record what a TF-Agents driver collects as RLDS episodes in a TFDS directory.

`RldsRecorder` is a TF-Agents observer (`driver = PyDriver(env, policy, observers=[recorder])`):
called with each `Trajectory`, it writes every finished episode as an RLDS episode, as
envlogger does for dm_env (docs/semantics.md §11):

* step t holds o_t, a_t, the policy info of a_t as step fields, and the reward and discount
  of the transition t -> t + 1 (`Trajectory.reward`, `Trajectory.discount`);
* the last step holds the final observation o_L (from the boundary trajectory the driver
  emits after a LAST time step), zero action and reward, and the discount of the LAST
  time step: 0 on termination, 1 (the environment's) on truncation;
* `is_terminal` is set on the last step of a terminated episode only (the LAST time step's
  discount is 0); a truncated episode (a time limit) has `is_last` without `is_terminal`;
  the recorder sees only trajectories, so a time limit must end with the environment's
  discount: TF-Agents' `TimeLimit` does, gym's (which `suite_gym.load` keeps) does not
  unless the environment is wrapped in `gym_envs.GymTimeLimitTruncation` (or loaded with
  `gym_envs.load_gym_env`);
* batched environments (`[B, ...]` trajectories) are kept apart: one episode per
  environment, each written when it ends.

Episodes that have not ended when the recorder closes (the driver stopped mid-episode, or
before the boundary trajectory of the last episode) are not written, and counted in
`RecordStats.partial_episodes`. The dataset appears in `directory` when the recorder
closes; used as a context manager it closes on exit, and on an error (or Ctrl-C) it closes
with the whole episodes recorded so far and notes that on the error. A process killed
before closing leaves only a hidden staging directory, which `rlds_reverb.load` names.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds
import tree

from rlds_reverb.core import types
from rlds_reverb.storage import tfds_writer

__all__ = [
    'RecordStats',
    'RldsRecorder',
]

# TF-Agents' StepType values.
_FIRST, _LAST = 0, 2
_POLICY_INFO = types.POLICY_INFO


@dataclasses.dataclass
class RecordStats:
    """What a recorder wrote: episodes (terminated, truncated), steps, partial episodes."""

    episodes: int = 0
    steps: int = 0
    terminated: int = 0
    truncated: int = 0
    partial_episodes: int = 0
    directory: pathlib.Path | None = None


def _policy_info_fields(policy_info) -> dict:
    """Returns the policy info as step fields: a dict's entries, else one `policy_info` field."""
    if isinstance(policy_info, Mapping):
        return dict(policy_info)
    if not tree.flatten(policy_info):
        return {}
    return {_POLICY_INFO: policy_info}


def _make_feature(spec):
    if isinstance(spec, Mapping):
        return tfds.features.FeaturesDict({k: _make_feature(v) for k, v in spec.items()})
    if isinstance(spec, list | tuple):
        raise ValueError(f'Cannot record a tuple or list field ({spec}); use dicts of tensors.')
    return tfds.features.Tensor(
        shape=tuple(spec.shape), dtype=tf.as_dtype(spec.dtype).as_numpy_dtype
    )


def make_step_specs(trajectory_spec) -> dict:
    """Returns the step specs (flags excluded) of the episodes a recorder writes.

    Raises:
      ValueError: If a policy info field has the name of an RLDS step field.
    """
    step = {
        types.OBSERVATION: trajectory_spec.observation,
        types.ACTION: trajectory_spec.action,
        types.REWARD: trajectory_spec.reward,
        types.DISCOUNT: trajectory_spec.discount,
    }
    info = _policy_info_fields(trajectory_spec.policy_info)
    clash = sorted(set(info) & {*types.REQUIRED_STEP_FIELDS})
    if clash:
        raise ValueError(f'Policy info field(s) {clash} have the names of RLDS step fields.')
    return {**step, **info}


class RldsRecorder:
    """A TF-Agents observer writing the episodes a driver collects as an RLDS TFDS dataset.

    An episode whose LAST time step has discount 0 is recorded as terminated, any other as
    truncated. Gym's own `TimeLimit`, which `suite_gym.load` keeps, ends episodes with
    discount 0; wrap such environments so that its end is a truncation:
    `suite_gym.load(name, env_wrappers=[gym_envs.GymTimeLimitTruncation])`, or load them
    with `gym_envs.load_gym_env(name)` (`rlds_reverb.export.gym_envs`).

    Example:
      >>> env = suite_gym.load('CartPole-v1', env_wrappers=[GymTimeLimitTruncation])
      >>> with RldsRecorder('/data/cartpole_rlds/1.0.0', policy.trajectory_spec) as recorder:
      ...     PyDriver(env, policy, observers=[recorder], max_episodes=10).run(env.reset())
      >>> rlds_reverb.load('/data/cartpole_rlds/1.0.0')
    """

    def __init__(
        self,
        directory: os.PathLike | str,
        trajectory_spec,
        *,
        name: str = 'tf_agents_episodes',
        version: str = '1.0.0',
        episodes_per_shard: int = 100,
        metadata: Mapping[str, Any] | None = None,
    ):
        """Opens the dataset for writing (it appears in `directory` on `close`).

        Args:
          directory: The dataset (version) directory to write; replaced once complete.
          trajectory_spec: The spec of the trajectories the driver emits, unbatched
            (`policy.trajectory_spec`, `agent.collect_data_spec`).
          name: The TFDS dataset name.
          version: The dataset version.
          episodes_per_shard: Episodes per TFRecord shard.
          metadata: JSON-serializable metadata, stored with the dataset.

        Raises:
          ValueError: If a policy info field has the name of an RLDS step field, or a field
            is a tuple.
        """
        self._step_specs = make_step_specs(trajectory_spec)
        features = tfds_writer.make_rlds_features(
            {k: _make_feature(v) for k, v in self._step_specs.items()}
        )
        self._dtypes = tree.map_structure(
            lambda s: tf.as_dtype(s.dtype).as_numpy_dtype, self._step_specs
        )
        self._writer = tfds_writer.RldsDatasetWriter(
            directory,
            features=features,
            name=name,
            version=version,
            metadata=metadata,
            episodes_per_shard=episodes_per_shard,
            keep_on_error=True,
        )
        self._open: dict[int, list[dict]] = {}  # Environment index -> steps so far.
        self._last_discount: dict[int, Any] = {}
        self._batched: bool | None = None
        self.stats = RecordStats()

    def __call__(self, trajectory) -> None:
        """Records one (possibly batched) trajectory."""
        step_type = np.asarray(trajectory.step_type)
        if self._batched is None:
            self._batched = step_type.ndim == 1
        if not self._batched:
            self._observe(0, tree.map_structure(np.asarray, trajectory))
            return
        numpy = tree.map_structure(np.asarray, trajectory)
        for env in range(step_type.shape[0]):
            self._observe(env, tree.map_structure(lambda x, env=env: x[env], numpy))

    def _step(
        self, trajectory, *, reward, discount, action, is_first, is_last, is_terminal
    ) -> dict:
        fields = {
            types.OBSERVATION: trajectory.observation,
            types.ACTION: action,
            types.REWARD: reward,
            types.DISCOUNT: discount,
            **_policy_info_fields(trajectory.policy_info),
        }
        step = tree.map_structure(lambda x, dtype: np.asarray(x, dtype), fields, self._dtypes)
        step.update(
            {types.IS_FIRST: is_first, types.IS_LAST: is_last, types.IS_TERMINAL: is_terminal}
        )
        return step

    def _observe(self, env: int, trajectory) -> None:
        step_type = int(trajectory.step_type)
        if step_type == _FIRST:
            if env in self._open:  # A new episode before the last one ended.
                self.stats.partial_episodes += 1
            self._open[env] = []
        steps = self._open.get(env)
        if steps is None:
            return  # Joined mid-episode: wait for the next FIRST step.
        if step_type == _LAST:  # The boundary trajectory: o_L, then the reset.
            discount = self._last_discount.pop(env)
            zeros = lambda x: np.zeros_like(x)  # noqa: E731
            terminal = bool(np.all([np.all(d == 0) for d in tree.flatten(discount)]))
            steps.append(
                self._step(
                    trajectory,
                    reward=tree.map_structure(zeros, trajectory.reward),
                    discount=discount,
                    action=tree.map_structure(zeros, trajectory.action),
                    is_first=len(steps) == 0,
                    is_last=True,
                    is_terminal=terminal,
                )
            )
            self._write(self._open.pop(env), terminal)
            return
        steps.append(
            self._step(
                trajectory,
                reward=trajectory.reward,
                discount=trajectory.discount,
                action=trajectory.action,
                is_first=step_type == _FIRST,
                is_last=False,
                is_terminal=False,
            )
        )
        self._last_discount[env] = trajectory.discount

    def _write(self, steps: list[dict], terminal: bool) -> None:
        whole = tree.map_structure(lambda *xs: np.stack(xs), *steps)
        self._writer.add_episode({types.STEPS: whole})
        self.stats.episodes += 1
        self.stats.steps += len(steps)
        self.stats.terminated += int(terminal)
        self.stats.truncated += int(not terminal)

    def close(self) -> RecordStats:
        """Writes the dataset's files and moves it into place; returns what was recorded.

        Episodes that have not ended are not written (`partial_episodes`).
        """
        self.stats.partial_episodes += len(self._open)
        self._open.clear()
        self.stats.directory = self._writer.close()
        return self.stats

    def __enter__(self) -> RldsRecorder:
        return self

    def __exit__(self, error_type, error, traceback) -> None:
        if error is None:
            self.close()
            return
        self.stats.partial_episodes += len(self._open)
        self._open.clear()
        self._writer.__exit__(error_type, error, traceback)
        self.stats.directory = self._writer.target
