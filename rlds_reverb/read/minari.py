"""Reads a Minari dataset (HDF5 or Arrow files) as RLDS episodes of whole-episode tensors.

Minari (the Farama Foundation's offline-RL format) keeps a dataset in
`<root>/<namespace>/<name>-v<N>/data/`: `metadata.json` and either `main_data.hdf5` or one
directory per episode of Arrow files (`rlds_reverb.read.minari_files` reads them);
`rlds_reverb.load(path)` reads such a directory with this module's `MinariReader`.

What an episode becomes (docs/semantics.md, "Minari files"): an episode of T environment
steps has T + 1 RLDS steps; step t holds `observations[t]`, `actions[t]` and `rewards[t]`,
the last step the final observation with zero action and reward; `is_terminal` on the last
step when the episode's last `terminations` entry is set (truncation is `is_last` alone);
discount 0 on the transition into a terminal step and on the terminal step, else 1. Dict
spaces are dicts, tuple spaces dicts keyed '0', '1', ... (as Minari's Arrow columns name
them); JPEG-encoded images are decoded to uint8. Episode fields: `episode_id` and `seed`
(-1 when Minari recorded none). `infos` are left out: metadata.json does not describe them
(so no spec is known before reading) and their keys may differ from one episode to the next.

The episodes are read one at a time (`MinariSource`, an `EpisodeSource`): the element spec
comes from metadata.json's spaces. A Minari dataset has one split, `'train'`, which takes
TFDS' slices (`'train[:10%]'`, `'train[10:20]'`); the slice, and `take`, `skip` and `shard`
of what `load` returns, narrow the list of episode ids (`core.sources.IndexSelection`), so
unselected episodes are never opened.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import pathlib
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import sources, types
from rlds_reverb.core.errors import SourceError
from rlds_reverb.read import minari_files, step_fields
from rlds_reverb.read.minari_files import SEED, DataFormat, find_data_directory
from rlds_reverb.read.options import LoadOptions

__all__ = [
    'DataFormat',
    'MinariReader',
    'MinariSource',
    'SEED',
    'find_data_directory',
    'open_minari',
]

# The one split of a Minari dataset (TFDS' name).
SPLIT = 'train'


@dataclasses.dataclass(frozen=True, eq=False)
class MinariSource(sources.EpisodeSource):
    """The episodes of a Minari dataset, read from its files one episode at a time.

    Fields:
      directory: The data directory (holding metadata.json and the data files).
      data_format: HDF5 or Arrow.
      observations: A nest of `minari_files.Leaf`s: the observation space.
      actions: A nest of `minari_files.Leaf`s: the action space.
      index: Which episodes are read (ids 0 .. total - 1): the split slice, then the
        selections of the loaded dataset.
      select_steps: Called in graph on the steps (to keep only some fields), or None.
    """

    directory: pathlib.Path
    data_format: DataFormat
    observations: Any = dataclasses.field(repr=False)
    actions: Any = dataclasses.field(repr=False)
    index: sources.IndexSelection = sources.IndexSelection(0)
    select_steps: Callable[[dict], dict] | None = dataclasses.field(default=None, repr=False)

    @property
    def episode_ids(self) -> tuple[int, ...]:
        """The ids the selections known in Python keep, in order (before `selections`)."""
        known = sources.IndexSelection(self.index.count, self.index.selections[: self._known()])
        return tuple(known.positions().tolist())

    @property
    def selections(self) -> tuple[sources.Selection, ...]:
        """Selections applied to `episode_ids` when read: from the first one whose count is
        a tensor (known only when run) on."""
        return self.index.selections[self._known() :]

    def _known(self) -> int:
        """How many of the first selections have counts known in Python."""
        for position, selection in enumerate(self.index.selections):
            if not sources.IndexSelection(0, (selection,)).is_static:
                return position
        return len(self.index.selections)

    def read(self) -> tf.data.Dataset:
        """Returns the selected episodes, each read from its file when iterated."""
        return self.index.as_dataset().map(
            episodes_lib.without_autograph(self._read_episode),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )

    def select(self, selection: sources.Selection) -> MinariSource:
        return dataclasses.replace(self, index=self.index.select(selection))

    def _read_episode(self, episode_id: tf.Tensor) -> dict:
        leaves = [
            *minari_files.flatten_leaves(self.observations),
            *minari_files.flatten_leaves(self.actions),
        ]
        outputs = tf.numpy_function(
            functools.partial(_read_numpy, self),
            [episode_id],
            [tf.string if leaf.jpeg else tf.as_dtype(leaf.dtype) for leaf in leaves]
            + [tf.float64, tf.bool, tf.int64],
            name='read_minari_episode',
        )
        *arrays, rewards, terminated, seed = outputs
        rewards.set_shape([None])
        terminated.set_shape([])
        seed.set_shape([])
        arrays = [_decode(array, leaf) for array, leaf in zip(arrays, leaves, strict=True)]
        steps = _make_steps(self, arrays, rewards, terminated)
        if self.select_steps is not None:
            steps = self.select_steps(steps)
        return {types.EPISODE_ID: episode_id, SEED: seed, types.STEPS: steps}


def _read_numpy(source: MinariSource, episode_id: np.ndarray) -> list[np.ndarray]:
    """Reads one episode's arrays (in NumPy, called by `tf.numpy_function`)."""
    return minari_files.read_episode_arrays(
        source.directory, source.data_format, source.observations, source.actions, int(episode_id)
    )


def _make_steps(
    source: MinariSource, arrays: list[tf.Tensor], rewards: tf.Tensor, terminated: tf.Tensor
) -> dict:
    """Returns an episode's RLDS steps from its observation and action arrays and rewards."""
    observations = len(minari_files.flatten_leaves(source.observations))
    length = tf.shape(rewards)[0] + 1  # RLDS steps: T environment steps + the last one.
    index = tf.range(length)
    is_last = tf.equal(index, length - 1)
    # 0 on the transition into a terminal last step and on that step (semantics §1).
    discount = 1.0 - tf.cast(terminated & (index >= length - 2), minari_files.REWARD_DTYPE)
    return {
        types.OBSERVATION: tf.nest.pack_sequence_as(source.observations, arrays[:observations]),
        types.ACTION: tf.nest.pack_sequence_as(
            source.actions, [_pad_one(a) for a in arrays[observations:]]
        ),
        types.REWARD: _pad_one(rewards),
        types.DISCOUNT: discount,
        types.IS_FIRST: tf.equal(index, 0),
        types.IS_LAST: is_last,
        types.IS_TERMINAL: is_last & terminated,
    }


def _pad_one(values: tf.Tensor) -> tf.Tensor:
    """Returns `values` with one step of zeros appended (the last step's placeholder)."""
    zeros = tf.zeros(tf.concat([[1], tf.shape(values)[1:]], 0), values.dtype)
    return tf.concat([values, zeros], 0)


def _decode(array: tf.Tensor, leaf: minari_files.Leaf) -> tf.Tensor:
    """Returns a leaf's `[T, ...]` tensor: JPEG frames decoded (as Minari does, with PIL)."""
    if not leaf.jpeg:
        array.set_shape([None, *leaf.shape])
        return array
    array.set_shape([None])
    channels = leaf.shape[2] if len(leaf.shape) == 3 else 1
    frames = tf.map_fn(
        lambda frame: tf.io.decode_jpeg(frame, channels=channels, dct_method='INTEGER_ACCURATE'),
        array,
        fn_output_signature=tf.TensorSpec([*leaf.shape[:2], channels], tf.uint8),
    )
    return tf.reshape(frames, [-1, *leaf.shape])


def _select_split(split: str, total: int, *, where: str) -> sources.IndexSelection:
    """Returns the episodes of `split`: `'train'` or one slice of it.

    Raises:
      SourceError: If `split` is another split, not valid, or several slices.
    """
    try:
        return sources.IndexSelection.from_split(split, total, split_name=SPLIT)
    except ValueError as e:
        raise SourceError(
            f'{where} has no splits (split={split!r}) of its own: it is read as one split, '
            f"'{SPLIT}', of {total} episodes, which split={split!r} does not select from ({e}). "
            f"Use '{SPLIT}', a slice such as '{SPLIT}[:10%]' or '{SPLIT}[10:20]', or .take, "
            '.skip and .shard of what load returns.'
        ) from e


def open_minari(
    directory: str | os.PathLike,
    *,
    split: str = SPLIT,
    select_steps: Callable[[dict], dict] | None = None,
) -> episodes_lib.EpisodeDataset:
    """Returns the episodes of a Minari dataset as an RLDS dataset (whole-episode tensors).

    Args:
      directory: The dataset's directory (`<name>-v<N>/`) or its `data/` directory.
      split: `'train'` (every episode) or one slice of it in TFDS' syntax
        (`'train[:10%]'`, `'train[10:20]'`), counted in episodes.
      select_steps: Called in graph on each episode's steps (to keep some fields), or None.

    Returns:
      An `EpisodeDataset` whose `take`, `skip` and `shard` narrow the episodes read.

    Raises:
      SourceError: If `directory` is not a Minari dataset directory, or `split` is neither
        `'train'` nor one slice of it.
      MinariFormatError: If metadata.json is empty, not JSON, or lacks or mangles a key
        (named), if its data format is not HDF5 or Arrow, or if the data file or an
        episode's data is missing or unreadable.

    Example:
      >>> episodes = open_minari('~/.minari/datasets/D4RL/door/human-v2', split='train[:5]')
    """
    data = find_data_directory(directory)
    if data is None:
        raise SourceError(
            f'{directory} is not a Minari dataset directory: expected '
            f'{minari_files.METADATA} in it or in its data/ directory.'
        )
    found = minari_files.read_description(data)
    source = MinariSource(
        directory=data,
        data_format=found.data_format,
        observations=found.observations,
        actions=found.actions,
        index=_select_split(split, found.total, where=f'the Minari dataset at {data}'),
        select_steps=select_steps,
    )
    return episodes_lib.from_source(source)


class MinariReader:
    """Reads a Minari dataset directory (`open_minari`); accepts `split` and `step_fields`."""

    name = 'minari'
    accepts = frozenset({'split', 'step_fields'})

    def recognizes(self, source: Any) -> bool:
        """Returns whether `source` is a Minari dataset directory (or its HDF5 file)."""
        return find_data_directory(source) is not None

    def open(self, source: Any, options: LoadOptions) -> tf.data.Dataset:
        """Returns the Minari dataset's episodes (`open_minari`), steps checked."""
        where = f'the Minari dataset at {find_data_directory(source)}'
        paths = options.step_paths
        select = None
        if paths is not None:

            def select(steps: dict) -> dict:
                return step_fields.select_step_fields(steps, paths, where=where)

        episodes = open_minari(source, split=options.split, select_steps=select)
        step_fields.check_step_spec(episodes, where=where)
        return episodes
