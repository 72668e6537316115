"""Drop-in replacements for TF-Agents' Reverb observers, built on Reverb's fast writers.

`ReverbAddTrajectoryObserver` and `ReverbAddEpisodeObserver` take the same constructor
arguments as TF-Agents' (`tf_agents.replay_buffers.reverb_utils`), write the same items, and
work in TF-Agents drivers. They add one keyword-only option, `keep_tails`:

* trajectory observer: TF-Agents drops the steps of an episode's end that no full
  `sequence_length` window covers (unless padding is asked for). With `keep_tails=True`
  the last `sequence_length` steps of the episode are also written (shorter if the whole
  episode is shorter), so no step is lost and nothing is invented;
* episode observer: TF-Agents drops (or refuses) episodes longer than
  `max_sequence_length`. With `keep_tails=True` they are written as consecutive
  `max_sequence_length` chunks, the last one shorter.

The trajectory observer appends each step once to a `StructuredWriter` whose configs
create the items in C++ (no per-step Python `history` slicing or `create_item` calls).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import reverb
import tensorflow as tf
import tree
from reverb import structured_writer as sw
from tf_agents.replay_buffers import reverb_utils
from tf_agents.trajectories import trajectory as trajectory_lib

from rlds_reverb.core import checks, timeouts
from rlds_reverb.serve import table_info
from rlds_reverb.write import configs, engines

__all__ = [
    'ReverbAddEpisodeObserver',
    'ReverbAddTrajectoryObserver',
]

# How long `get_table_signature` waits for a live server (TF-Agents' waits forever).


def _as_table_names(table_name: str | Sequence[str]) -> list[str]:
    return [table_name] if isinstance(table_name, str) else list(table_name)


def _wait(client: reverb.Client, wait) -> None:
    """Waits for the server as TF-Agents' observers do (no timeout), but names a dead one."""
    engines.wait_on_server(wait, address=client.server_address, timeout_ms=None)


def _end_and_release(client: reverb.Client, writer, release: Callable[[Any], object]) -> None:
    """Ends the episode on an observer's `writer` (if it has one), then `release`s it.

    The writer is released also when the server stops answering (the error is raised after).
    """
    if writer is None:
        return
    try:
        _wait(client, lambda ms: writer.end_episode(timeout_ms=ms))
    finally:
        release(writer)


def _fetch_signature(client: reverb.Client, table: str):
    """Returns `table`'s signature; a dead server is named (`table_info.fetch_server_info`)."""
    infos = table_info.fetch_server_info(client, timeout_ms=timeouts.OBSERVER_SERVER_INFO_MS)
    info: Any = infos[table]  # A `reverb.TableInfo`.
    return info.signature


@dataclasses.dataclass(frozen=True)
class TwoStepWrites:
    """Where an observer writes plain two-step items: its tables and their priority."""

    table_names: list[str]
    priority: float


def describe_two_step_writes(observer) -> TwoStepWrites | None:
    """Returns where `observer` writes, when it writes plain two-step items; else None.

    Plain two-step items are what `ReverbAddTrajectoryObserver(sequence_length=2,
    stride_length=1)` writes without padding or tails, starting from an empty cache: then a
    push writes the same items faster. This package's observer says so through its public
    properties; TF-Agents' observer has none, so its settings are read from its attributes
    here, in this one place.
    """
    if type(observer) is ReverbAddTrajectoryObserver:
        plain = observer.writes_plain_two_step_items
        return TwoStepWrites(observer.table_names, float(observer.priority)) if plain else None
    if type(observer) is not reverb_utils.ReverbAddTrajectoryObserver:
        return None
    settings = vars(observer)  # TF-Agents' observer keeps its settings private.
    plain = (
        settings.get('_sequence_length') == 2
        and settings.get('_stride_length') == 1
        and not settings.get('_pad_end_of_episodes', True)
        and settings.get('_cached_steps', 1) == 0
    )
    if not plain:
        return None
    return TwoStepWrites(list(settings['_table_names']), float(settings['_priority']))


class ReverbAddTrajectoryObserver:
    """Writes fixed-length trajectories to Reverb, as TF-Agents' observer of that name.

    Args:
      py_client: A `reverb.Client`.
      table_name: The table name(s).
      sequence_length: Steps per item.
      stride_length: Steps between item starts.
      priority: The items' priority.
      pad_end_of_episodes: Pad the episode's end with boundary steps (TF-Agents' option).
      tile_end_of_episodes: With padding, write every padded item (TF-Agents' option).
      keep_tails: Also write the episode's last `sequence_length` steps when no item ends
        there (shorter for shorter episodes); see the module docstring.

    Raises:
      ValueError: If `tile_end_of_episodes` is set without `pad_end_of_episodes`, or
        `keep_tails` together with padding.

    Example:
      >>> observer = ReverbAddTrajectoryObserver(client, 'replay', sequence_length=2)
      >>> driver = py_driver.PyDriver(env, policy, [observer], max_steps=1000)
    """

    def __init__(
        self,
        py_client: reverb.Client,
        table_name: str | Sequence[str],
        sequence_length: int,
        stride_length: int = 1,
        priority: float | int = 1,
        pad_end_of_episodes: bool = False,
        tile_end_of_episodes: bool = False,
        *,
        keep_tails: bool = False,
    ):
        if tile_end_of_episodes and not pad_end_of_episodes:
            raise ValueError(
                'Must set `pad_end_of_episodes=True` when using `tile_end_of_episodes`'
            )
        if keep_tails and pad_end_of_episodes:
            raise ValueError('keep_tails writes real tail steps; it excludes pad_end_of_episodes.')
        self._py_client = py_client
        self._table_names = _as_table_names(table_name)
        self._sequence_length = sequence_length
        self._stride_length = stride_length
        self._priority = priority
        self._pad_end_of_episodes = pad_end_of_episodes
        self._tile_end_of_episodes = tile_end_of_episodes
        self._keep_tails = keep_tails
        self._writer: sw.StructuredWriter | None = None
        self._cached_steps = 0
        self._last_trajectory: trajectory_lib.Trajectory | None = None

    @property
    def py_client(self) -> reverb.Client:
        return self._py_client

    @property
    def table_names(self) -> list[str]:
        """The tables that get every item."""
        return list(self._table_names)

    @property
    def sequence_length(self) -> int:
        """Steps per item."""
        return self._sequence_length

    @property
    def stride_length(self) -> int:
        """Steps between item starts."""
        return self._stride_length

    @property
    def priority(self) -> float | int:
        """The items' priority."""
        return self._priority

    @property
    def pad_end_of_episodes(self) -> bool:
        """Whether episode ends are padded with boundary steps (TF-Agents' option)."""
        return self._pad_end_of_episodes

    @property
    def keep_tails(self) -> bool:
        """Whether episode tails no window covers are written too."""
        return self._keep_tails

    @property
    def cached_steps(self) -> int:
        """Steps of the current episode appended so far."""
        return self._cached_steps

    @property
    def writes_plain_two_step_items(self) -> bool:
        """Whether the next items are plain two-step items (`push` can write them instead)."""
        return (
            self._sequence_length == 2
            and self._stride_length == 1
            and not self._pad_end_of_episodes
            and not self._keep_tails
            and self._cached_steps == 0
        )

    def get_table_signature(self):
        """Returns the first table's signature (all tables share it)."""
        return _fetch_signature(self._py_client, self._table_names[0])

    def _get_writer(self, trajectory) -> sw.StructuredWriter:
        if self._writer is None:
            # Reverb can crash the process (a segfault) when a writer is created for a server
            # that stopped; a dead server is named here instead.
            table_info.probe_server(self._py_client.server_address)
            window_configs = configs.make_window_configs(
                tree.map_structure(lambda _: None, trajectory),
                self._table_names,
                length=self._sequence_length,
                period=self._stride_length,
                priority=self._priority,
                keep_tails=self._keep_tails,
            )
            self._writer = self._py_client.structured_writer(window_configs)
        return self._writer

    def __call__(self, trajectory: trajectory_lib.Trajectory) -> None:
        """Appends one (unbatched) trajectory step; items are created by the writer.

        Raises:
          ReverbConnectionError: If nothing answers at the server's address when the first
            step makes the writer.
        """
        self._get_writer(trajectory).append(trajectory)
        self._last_trajectory = trajectory
        self._cached_steps += 1
        if trajectory.is_boundary():
            self.reset(write_cached_steps=self._pad_end_of_episodes)

    def _append_padding(self, writer: sw.StructuredWriter, last: trajectory_lib.Trajectory) -> None:
        zero = trajectory_lib.boundary(
            *(
                tf.nest.map_structure(tf.zeros_like, field)
                for field in (
                    last.observation,
                    last.action,
                    last.policy_info,
                    last.reward,
                    last.discount,
                )
            )
        )
        if self._tile_end_of_episodes:
            count = self._sequence_length - 1
        else:
            count = max(0, self._sequence_length - self._cached_steps)
        for _ in range(count):
            writer.append(zero)

    def flush(self) -> None:
        """Blocks until every item written so far is confirmed by the server.

        Raises:
          ReverbConnectionError: If the server stops answering meanwhile.
        """
        if self._writer is not None:
            writer = self._writer
            _wait(self._py_client, lambda ms: writer.flush(timeout_ms=ms))

    def reset(self, write_cached_steps: bool = True) -> None:
        """Ends the episode: pads it first when asked to; clears the cache.

        Raises:
          ReverbConnectionError: If the server stops answering before it confirms the items.
        """
        writer, last = self._writer, self._last_trajectory
        if writer is not None:
            if write_cached_steps and self._pad_end_of_episodes and last is not None:
                self._append_padding(writer, last)
            _wait(self._py_client, lambda ms: writer.end_episode(timeout_ms=ms))
        self._cached_steps = 0
        self._last_trajectory = None

    def open(self) -> None:
        """No-op: the writer opens on the first step (its structure is needed)."""

    def close(self) -> None:
        """Ends the episode and releases the writer (also when the server died).

        Raises:
          ReverbConnectionError: If the server stops answering before it confirms the items;
            the writer is released all the same.
        """
        writer, self._writer = self._writer, None
        release = functools.partial(
            engines.release_structured_writer, address=self._py_client.server_address
        )
        _end_and_release(self._py_client, writer, release)

    def __del__(self):
        # TF-Agents' observer closes its TrajectoryWriter when collected; a StructuredWriter
        # cannot be closed, and its destructor would wait forever for a dead server.
        writer = getattr(self, '_writer', None)
        if writer is not None:
            engines.release_structured_writer(writer)


class ReverbAddEpisodeObserver:
    """Writes whole episodes to Reverb, as TF-Agents' observer of that name.

    Args:
      py_client: A `reverb.Client`.
      table_name: The table name(s).
      max_sequence_length: The most steps per item.
      priority: The items' priority.
      bypass_partial_episodes: Drop (instead of raising for) episodes that are too long.
      keep_tails: Write too-long episodes as `max_sequence_length` chunks instead.

    Raises:
      ValueError: If `max_sequence_length` < 1; when called, if an episode is too long and
        neither `bypass_partial_episodes` nor `keep_tails` is set.

    Example:
      >>> observer = ReverbAddEpisodeObserver(client, 'episodes', 1000, keep_tails=True)
    """

    def __init__(
        self,
        py_client: reverb.Client,
        table_name: str | Sequence[str],
        max_sequence_length: int,
        priority: float | int = 1,
        bypass_partial_episodes: bool = False,
        *,
        keep_tails: bool = False,
    ):
        checks.check_int_at_least(max_sequence_length, 1, argument='max_sequence_length')
        self._py_client = py_client
        self._table_names = _as_table_names(table_name)
        self._max_sequence_length = max_sequence_length
        self._priority = priority
        self._bypass_partial_episodes = bypass_partial_episodes
        self._keep_tails = keep_tails
        self._writer = py_client.trajectory_writer(max_sequence_length + 1, validate_items=False)
        self._cached_steps = 0
        self._overflow_episode = False

    @property
    def py_client(self) -> reverb.Client:
        return self._py_client

    def get_table_signature(self):
        """Returns the first table's signature (all tables share it)."""
        return _fetch_signature(self._py_client, self._table_names[0])

    def update_priority(self, priority: float | int) -> None:
        """Sets the priority of the items written from now on."""
        self._priority = priority

    def _write_cached_steps(self) -> None:
        if self._cached_steps:
            history = self._writer.history
            trajectory = tree.map_structure(lambda h: h[-self._cached_steps :], history)
            for table in self._table_names:
                self._writer.create_item(table, self._priority, trajectory)
        self._cached_steps = 0

    def __call__(self, trajectory: trajectory_lib.Trajectory) -> None:
        """Caches one step; writes the episode at its boundary step."""
        if self._cached_steps >= self._max_sequence_length and not self._overflow_episode:
            if self._keep_tails:
                self._write_cached_steps()
            elif self._bypass_partial_episodes:
                self._overflow_episode = True
            else:
                raise ValueError(
                    'The number of trajectories within the same episode exceeds '
                    '`max_sequence_length`. Increase it, set `bypass_partial_episodes`, or '
                    'pass keep_tails=True to write the episode in chunks.'
                )
        if self._overflow_episode:
            if trajectory.is_boundary():
                self.reset(write_cached_steps=False)
            return
        self._writer.append(trajectory)
        self._cached_steps += 1
        if trajectory.is_boundary():
            self.reset(write_cached_steps=True)

    def flush(self) -> None:
        """Blocks until every item written so far is confirmed by the server.

        Raises:
          ReverbConnectionError: If the server stops answering meanwhile.
        """
        writer = self._writer
        _wait(self._py_client, lambda ms: writer.flush(timeout_ms=ms))

    def reset(self, write_cached_steps: bool = True) -> None:
        """Ends the episode, writing the cached steps first when asked to.

        Raises:
          ReverbConnectionError: If the server stops answering before it confirms the items.
        """
        if write_cached_steps:
            self._write_cached_steps()
        self._cached_steps = 0
        self._overflow_episode = False
        writer = self._writer
        _wait(self._py_client, lambda ms: writer.end_episode(timeout_ms=ms))

    def open(self) -> None:
        """Opens a writer if the observer was closed."""
        if self._writer is None:
            self._writer = self._py_client.trajectory_writer(
                self._max_sequence_length + 1, validate_items=False
            )

    def close(self) -> None:
        """Ends the episode and closes the writer (also when the server died).

        Raises:
          ReverbConnectionError: If the server stops answering before it confirms the items;
            the writer is closed all the same.
        """
        writer, self._writer = self._writer, None
        _end_and_release(self._py_client, writer, lambda w: w.close())
