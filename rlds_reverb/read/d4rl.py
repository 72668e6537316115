"""Reads D4RL's own HDF5 files (`halfcheetah_medium-v2.hdf5`) as RLDS episodes.

A D4RL file holds one row per transition: `observations`, `actions`, `rewards`,
`terminals` and `timeouts` (`[N, ...]` each), optionally `next_observations`, step
metadata under `infos/` and dataset metadata under `metadata/` (`d4rl_layout` checks and
reads them). The episodes are the ones TFDS 4.9.4's d4rl builder
(`tensorflow_datasets/d4rl/dataset_utils.py`) makes of the same file, without preparing a
TFDS dataset first (docs/semantics.md, "D4RL files"):

* an episode ends at a row with `terminals` or `timeouts` set, or at the end of the file;
* it gains one last step when it ends on a terminal or the file has `next_observations`:
  that step's observation is the episode's last `next_observations` row (zeros without
  them), its action, reward and `infos` zeros, its discount 0, `is_last` set and
  `is_terminal` as the episode's last `terminals`; a terminal episode's transition into
  it gets discount 0 too;
* otherwise (time limit, end of file, no `next_observations`) the episode's last row is
  its last step, with `is_last` set and `is_terminal` not;
* `discount` is 1 elsewhere, in the rewards' dtype; `rewards` of shape `[N, 1]` are `[N]`;
  `infos/*` are step fields under `infos`, `metadata/*` episode-level fields (the same on
  every episode), nested at each `/`.

One deliberate difference: TFDS gives every episode the file's last `next_observations`
row as its final observation (it indexes the whole column); this reader uses the
episode's own. A file without `timeouts` (TFDS refuses those) is read when it has
`next_observations`: an episode also ends where `next_observations[t]` is not
`observations[t + 1]` (a reset that was not marked).

Reading streams: the episode boundaries come once from `terminals` and `timeouts` (two
boolean columns), then the selected episodes are read in blocks of consecutive rows with
h5py slices, each episode built as whole `[T, ...]` arrays. `D4rlSource` is an
`EpisodeSource`: the split slice (`'train[:10%]'`) and `take`, `skip` and `shard` narrow
its list of episodes (`core.sources.IndexSelection`), so unselected episodes are never read.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import tensorflow as tf

from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import sources, types
from rlds_reverb.core.errors import D4rlFileError
from rlds_reverb.read import d4rl_layout, step_fields
from rlds_reverb.read.d4rl_layout import INFOS
from rlds_reverb.read.options import LoadOptions

# Helpers of the package's other modules only (`load` reads D4RL files): nothing public.
__all__: list[str] = []

SUFFIXES = ('.hdf5', '.h5')
# The only split of a D4RL file (TFDS' name).
SPLIT = 'train'
_INFOS_PREFIX = d4rl_layout.INFOS_PREFIX
_METADATA_PREFIX = d4rl_layout.METADATA_PREFIX
# Step metadata: (`infos/...` key, its path under `infos`).
InfoKeys = tuple[tuple[str, tuple[str, ...]], ...]


def is_d4rl_path(source: Any) -> bool:
    """Returns whether `source` is a path to an existing HDF5 file (`.hdf5` or `.h5`)."""
    if not isinstance(source, str | os.PathLike):
        return False
    path = pathlib.Path(source).expanduser()
    return path.suffix.lower() in SUFFIXES and path.is_file()


@dataclasses.dataclass(frozen=True, eq=False)
class D4rlSource(sources.EpisodeSource):
    """The episodes of a D4RL HDF5 file: what `load` reads from it.

    Fields:
      path: The file.
      starts: Each episode's first row (ascending).
      ends: Each episode's end row (exclusive).
      terminal: Whether each episode ends on a terminal (`terminals` at its last row).
      has_next_observations: Whether the file has `next_observations` (every episode
        then gains a last step holding its last one).
      step_spec: The spec of one step (fields `load` keeps), with no time dimension.
      infos: (`infos/...` key, path in `infos`) of the kept step metadata.
      metadata: The episode-level fields, read once (small: names, policy weights).
      index: Which episodes are read: the split slice, then `take`, `skip` and `shard`.
    """

    path: str
    starts: np.ndarray = dataclasses.field(repr=False)
    ends: np.ndarray = dataclasses.field(repr=False)
    terminal: np.ndarray = dataclasses.field(repr=False)
    has_next_observations: bool
    step_spec: dict = dataclasses.field(repr=False)
    infos: InfoKeys = ()
    metadata: dict = dataclasses.field(default_factory=dict, repr=False)
    index: sources.IndexSelection | None = None

    def read(self) -> tf.data.Dataset:
        """Returns the selected episodes as whole-episode tensors, read from the file."""
        indices = self.list_episodes()
        signature = {
            **tf.nest.map_structure(_spec_of, self.metadata),
            types.STEPS: tf.nest.map_structure(
                lambda s: tf.TensorSpec([None, *s.shape], s.dtype), self.step_spec
            ),
        }
        return tf.data.Dataset.from_generator(
            lambda: self._generate(indices), output_signature=signature
        ).prefetch(1)

    def select(self, selection: sources.Selection) -> D4rlSource:
        return dataclasses.replace(self, index=self._index().select(selection))

    def list_episodes(self) -> np.ndarray:
        """Returns the selected episodes' numbers in the file, in order."""
        return self._index().positions()

    def _index(self) -> sources.IndexSelection:
        return self.index or sources.IndexSelection(len(self.starts))

    def _generate(self, indices: np.ndarray) -> Iterator[dict]:
        """Yields the episodes `indices` names, reading consecutive ones in one block."""
        import h5py  # Only when a D4RL file is read.

        keys = (d4rl_layout.OBSERVATIONS, d4rl_layout.ACTIONS, d4rl_layout.REWARDS)
        with h5py.File(self.path, 'r') as file:
            columns = {key: file[key] for key in keys + tuple(key for key, _ in self.infos)}
            next_observations = (
                file[d4rl_layout.NEXT_OBSERVATIONS] if self.has_next_observations else None
            )
            for block in d4rl_layout.group_blocks(self.starts, self.ends, indices):
                first, last = int(self.starts[block[0]]), int(self.ends[block[-1]])
                rows = {key: column[first:last] for key, column in columns.items()}
                finals = (
                    next_observations[np.asarray(self.ends[block] - 1)]
                    if next_observations is not None
                    else None
                )
                for position, episode in enumerate(block):
                    start = int(self.starts[episode]) - first
                    end = int(self.ends[episode]) - first
                    whole = d4rl_layout.build_steps(
                        {key: values[start:end] for key, values in rows.items()},
                        infos=self.infos,
                        terminal=bool(self.terminal[episode]),
                        final_observation=None if finals is None else finals[position],
                        extra_step=bool(self.terminal[episode]) or finals is not None,
                    )
                    yield {**self.metadata, types.STEPS: d4rl_layout.prune(whole, self.step_spec)}
                del rows, finals, whole  # Before the next block is read: one block at a time.


def _tf_dtype(dtype: np.dtype) -> tf.DType:
    """Returns the TF dtype of a NumPy dtype; strings and objects (h5py's) are `tf.string`."""
    return tf.string if dtype.kind in 'OSU' else tf.as_dtype(dtype)


def _spec_of(value: Any) -> tf.TensorSpec:
    array = np.asarray(value)
    return tf.TensorSpec(array.shape, _tf_dtype(array.dtype))


def _row_spec(dataset: Any) -> tf.TensorSpec:
    return tf.TensorSpec(dataset.shape[1:], _tf_dtype(dataset.dtype))


def _make_step_spec(datasets: dict[str, Any]) -> tuple[dict, InfoKeys]:
    """Returns the spec of one step of the file's episodes, and its step metadata keys."""
    reward = datasets[d4rl_layout.REWARDS]
    reward_shape = reward.shape[1:] if int(np.prod(reward.shape[1:])) != 1 else ()
    reward_dtype = _tf_dtype(reward.dtype)
    flag = tf.TensorSpec([], tf.bool)
    step_spec: dict = {
        types.OBSERVATION: _row_spec(datasets[d4rl_layout.OBSERVATIONS]),
        types.ACTION: _row_spec(datasets[d4rl_layout.ACTIONS]),
        types.REWARD: tf.TensorSpec(reward_shape, reward_dtype),
        types.DISCOUNT: tf.TensorSpec([], reward_dtype),
        types.IS_FIRST: flag,
        types.IS_LAST: flag,
        types.IS_TERMINAL: flag,
    }
    infos = tuple(
        (key, tuple(key[len(_INFOS_PREFIX) :].split('/')))
        for key in sorted(datasets)
        if key.startswith(_INFOS_PREFIX)
    )
    for key, info_path in infos:
        d4rl_layout.set_nested(step_spec.setdefault(INFOS, {}), info_path, _row_spec(datasets[key]))
    return step_spec, infos


def _read_metadata(datasets: dict[str, Any]) -> dict:
    """Returns the file's `metadata/*` as nested episode-level fields."""
    metadata: dict = {}
    for key in sorted(datasets):
        if key.startswith(_METADATA_PREFIX):
            path = tuple(key[len(_METADATA_PREFIX) :].split('/'))
            d4rl_layout.set_nested(metadata, path, datasets[key][()])
    return metadata


def make_d4rl_source(path: str | os.PathLike, *, select_steps: Any = None) -> D4rlSource:
    """Returns the source of a D4RL HDF5 file's episodes (boundaries found once, now).

    Args:
      path: The `.hdf5` or `.h5` file.
      select_steps: Called with the full step spec (a nest of `tf.TensorSpec`) to prune
        it to the fields `load` keeps; None keeps all.

    Returns:
      The file's `D4rlSource`.

    Raises:
      D4rlFileError: If the file is not in D4RL's layout: a required key missing, no rows,
        a per-step key of another length, neither `timeouts` nor `next_observations`; or
        h5py cannot open it.
    """
    import h5py

    path = os.fspath(pathlib.Path(path).expanduser())
    where = f'D4RL file {path}'
    try:
        file = h5py.File(path, 'r')
    except OSError as e:
        raise D4rlFileError(
            f'{where} is not a readable HDF5 file ({e}). Download it again, or pass a TFDS '
            'dataset directory.'
        ) from e
    with file:
        datasets = d4rl_layout.list_datasets(file)
        rows = d4rl_layout.check_layout(datasets, where=where)
        starts, ends, terminal = d4rl_layout.find_boundaries(datasets, rows, where=where)
        step_spec, infos = _make_step_spec(datasets)
        metadata = _read_metadata(datasets)
    if select_steps is not None:
        step_spec = select_steps(step_spec)
    kept = step_spec.get(INFOS, {})
    return D4rlSource(
        path=path,
        starts=starts,
        ends=ends,
        terminal=terminal,
        has_next_observations=d4rl_layout.NEXT_OBSERVATIONS in datasets,
        step_spec=step_spec,
        infos=tuple((key, p) for key, p in infos if d4rl_layout.has_path(kept, p)),
        metadata=metadata,
    )


def load_d4rl(
    path: str | os.PathLike, *, split: str = SPLIT, select_steps: Any = None
) -> episodes_lib.EpisodeDataset:
    """Returns the RLDS episodes of a D4RL HDF5 file (what `rlds_reverb.load` reads).

    Args:
      path: The `.hdf5` or `.h5` file.
      split: `'train'`, the only split of a D4RL file, or one slice of it in TFDS'
        syntax (`'train[:10%]'`, `'train[100:200]'`), counted in episodes.
      select_steps: Prunes the step spec to the kept fields (see `make_d4rl_source`).

    Returns:
      An `EpisodeDataset` on the file's `D4rlSource`.

    Raises:
      D4rlFileError: If the file is not in D4RL's layout (see `make_d4rl_source`), or
        `split` is neither `'train'` nor one slice of it.
    """
    source = make_d4rl_source(path, select_steps=select_steps)
    episodes = len(source.starts)
    try:
        index = sources.IndexSelection.from_split(split, episodes, split_name=SPLIT)
    except ValueError as e:
        raise D4rlFileError(
            f"D4RL file {source.path} has one split, '{SPLIT}' ({episodes} episodes); "
            f"split={split!r} does not select from it: {e}. Use '{SPLIT}', a slice such as "
            f"'{SPLIT}[:10%]', or .take(), .skip() and .shard() on what load returns."
        ) from e
    return episodes_lib.from_source(dataclasses.replace(source, index=index))


class D4rlReader:
    """Reads a D4RL HDF5 file (`load_d4rl`); accepts `split` and `step_fields`."""

    name = 'd4rl'
    accepts = frozenset({'split', 'step_fields'})

    def recognizes(self, source: Any) -> bool:
        """Returns whether `source` is an existing `.hdf5` or `.h5` file."""
        return is_d4rl_path(source)

    def open(self, source: Any, options: LoadOptions) -> tf.data.Dataset:
        """Returns the file's episodes (`load_d4rl`)."""
        paths, where = options.step_paths, os.fspath(source)

        def select(spec: dict) -> dict:
            return step_fields.select_step_fields(spec, paths, where=where)

        return load_d4rl(source, split=options.split, select_steps=select)
