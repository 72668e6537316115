"""Whole-episode tensors: the shape every vectorized path in the toolkit works on.

An RLDS episode holds its steps as a nested `tf.data.Dataset`. The fast paths turn each
episode into one dict of tensors with a leading time dimension (`[T, ...]` per field), work
on whole tensors, and only then go back to steps. An `EpisodeDataset` (what `load` and the
adders return) is an RLDS dataset that carries the source of its episodes
(`core.sources`), so the toolkit reads them whole without the nested steps.
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

from rlds_reverb.core import compat, sources, types
from rlds_reverb.core.frames import FrameFormat, FrameFormats

__all__ = [
    'EpisodeDataset',
    'batch_steps',
    'compute_terminal_discounts',
    'episode_length',
    'find_frame_formats',
    'to_episode_tensors',
]

# tf.data's batch size for "the whole episode": larger than any episode.
_WHOLE_EPISODE = 2**31 - 1


def _empty_batch(step_spec: types.SpecNest) -> types.Nest:
    """Returns a zero-length batch of steps matching `step_spec` (unknown dims become 0).

    A field of unknown rank gets a `[0]` tensor, which its spec accepts.
    """

    def _zeros(spec: tf.TensorSpec) -> tf.Tensor:
        if spec.shape.rank is None:  # Any rank fits; validation compares per-step shapes.
            return tf.zeros([0], dtype=spec.dtype)
        dims = [0] + [d if d is not None else 0 for d in spec.shape.as_list()]
        return tf.zeros(dims, dtype=spec.dtype)

    return tf.nest.map_structure(_zeros, step_spec)


def batch_steps(steps: tf.data.Dataset) -> types.Nest:
    """Returns all steps of one episode as one nest of `[T, ...]` tensors (T may be 0).

    Usable inside `tf.data` maps: `episodes.map(lambda e: batch_steps(e['steps']))`.

    Args:
      steps: The episode's steps dataset.

    Returns:
      A nest shaped like one step, each leaf with a leading time dimension.
    """
    empty = tf.data.Dataset.from_tensors(_empty_batch(steps.element_spec))
    whole = steps.batch(_WHOLE_EPISODE).concatenate(empty).take(1)
    return whole.get_single_element()


def without_autograph(fn: Callable) -> Callable:
    """Returns `fn` marked for tracing as written, without AutoGraph's rewriting.

    The toolkit's `tf.data` functions use `tf.where`/`tf.cond`, never Python control flow
    on tensors, so AutoGraph has nothing to convert; skipping it cut a push's set-up from
    0.54 s to 0.47 s here.
    """
    return tf.autograph.experimental.do_not_convert(fn)


def _to_rlds(whole: tf.data.Dataset) -> tf.data.Dataset:
    """Returns the RLDS view of whole episodes: `steps` sliced back into a steps dataset."""
    return whole.map(
        without_autograph(
            lambda e: {**e, types.STEPS: tf.data.Dataset.from_tensor_slices(e[types.STEPS])}
        )
    )


def _rlds_element_spec(whole_spec: dict) -> dict:
    """Returns the element spec `_to_rlds` gives whole episodes of `whole_spec`, untraced."""
    # As `from_tensor_slices` derives it: each component's spec without the time axis.
    step_spec = tf.nest.map_structure(compat.unbatch_spec, whole_spec[types.STEPS])
    return {**whole_spec, types.STEPS: tf.data.DatasetSpec(step_spec)}


class EpisodeDataset(compat.DeferredDataset):
    """An RLDS dataset that carries the source of its episodes, read as whole tensors.

    What `rlds_reverb.load` (for a TFDS source) and the adders return: a real
    `tf.data.Dataset` of RLDS episodes for every use, whose `source` the toolkit's functions
    (`to_whole_episodes`, `to_episode_tensors`; validate, convert, push, stats) read instead
    of the per-step nested datasets. `take`, `skip` and `shard` return another
    `EpisodeDataset` on the selected source (for TFRecord shards: skipped episodes are never
    decoded); any other transformation (`map`, `filter`, `batch`, ...) returns a plain
    dataset, which the toolkit reads through its nested steps, correctly but more slowly.

    A selection's pipeline is built when first used (iterated, transformed, or read whole),
    so a chain such as `.skip(a).take(n)` traces the decoding once, and a bulk reader of
    the source (validate's record checks) traces none.

    Step fields read with their frames left encoded (`load(..., encoded_frames=...)`) are
    `tf.string` tensors; `frame_formats` says how each is encoded (`core.frames`), and
    `take`, `skip`, `shard` and the adders keep it.

    Args:
      source: What the episodes come from.
      element_spec: The episodes' spec when known (a selection keeps its dataset's); None
        builds the pipeline now to learn it.
      frame_formats: The formats of the step fields that hold encoded frames, by path
        (`'observation/image'`); empty when none does.
    """

    def __init__(
        self,
        source: sources.EpisodeSource,
        *,
        element_spec=None,
        frame_formats: FrameFormats | None = None,
    ):
        self._source = source
        self._frame_formats = dict(frame_formats or {})
        self._whole = None
        self._rlds = None
        # Built later only in eager mode (then lifted out of any function being traced).
        if element_spec is None or not tf.executing_eagerly():
            self._whole = source.read()
            # The RLDS view's map is traced only when the steps are read through it: the
            # toolkit's functions read `whole_episodes` (a trace less before their first
            # element).
            element_spec = _rlds_element_spec(self._whole.element_spec)
            if not tf.executing_eagerly():
                self._rlds = _to_rlds(self._whole)
        self._element_spec = element_spec
        super().__init__()  # Its variant tensor is the RLDS pipeline's, built on first use.

    def _build_whole(self) -> tf.data.Dataset:
        if self._whole is None:
            with tf.init_scope():
                self._whole = self._source.read()
        return self._whole

    def _build_rlds(self) -> tf.data.Dataset:
        if self._rlds is None:
            whole = self._build_whole()
            with tf.init_scope():
                self._rlds = _to_rlds(whole)
        return self._rlds

    def _build_pipeline(self) -> tf.data.Dataset:
        return self._build_rlds()

    def _built_inputs(self) -> list[tf.data.Dataset]:
        return [] if self._rlds is None else [self._rlds]

    @property
    def element_spec(self):
        return self._element_spec

    @property
    def source(self) -> sources.EpisodeSource:
        """What the episodes come from."""
        return self._source

    @property
    def frame_formats(self) -> dict[str, FrameFormat]:
        """The formats of the step fields holding encoded frames, by path (a copy)."""
        return dict(self._frame_formats)

    @property
    def whole_episodes(self) -> tf.data.Dataset:
        """The episodes with `steps` as a nest of whole `[T, ...]` tensors."""
        return self._build_whole()

    def _select(self, selection: sources.Selection) -> EpisodeDataset:
        selection.apply(tf.data.Dataset.range(0))  # Bad arguments raise now, as in tf.data.
        return EpisodeDataset(
            self._source.select(selection),
            element_spec=self._element_spec,
            frame_formats=self._frame_formats,
        )

    def take(self, count, name=None) -> EpisodeDataset:
        """As `tf.data.Dataset.take`, on the source: the result reads whole episodes too."""
        return self._select(sources.Take(count, name))

    def skip(self, count, name=None) -> EpisodeDataset:
        """As `tf.data.Dataset.skip`, on the source: the result reads whole episodes too."""
        return self._select(sources.Skip(count, name))

    def shard(self, num_shards, index, name=None) -> EpisodeDataset:
        """As `tf.data.Dataset.shard`, on the source: the result reads whole episodes too."""
        return self._select(sources.Shard(num_shards, index, name))


def from_source(
    source: sources.EpisodeSource, *, frame_formats: FrameFormats | None = None
) -> EpisodeDataset:
    """Returns the RLDS dataset of `source`'s episodes (an `EpisodeDataset`).

    Args:
      source: What the episodes come from.
      frame_formats: The formats of the step fields holding encoded frames, by path.

    Example:
      >>> episodes = from_source(sources.DatasetSource(whole_episodes))
    """
    return EpisodeDataset(source, frame_formats=frame_formats)


def from_whole_episodes(
    whole_episodes: tf.data.Dataset, *, frame_formats: FrameFormats | None = None
) -> EpisodeDataset:
    """Returns the RLDS dataset of whole episodes, remembering their tensor form.

    The RLDS dataset is what users see and may transform further; the toolkit's own
    functions given this very dataset, or its `take`, `skip` or `shard`
    (`to_whole_episodes`, `to_episode_tensors`), read the tensors and skip the per-step
    nested dataset.

    Args:
      whole_episodes: Episodes as dicts: episode-level fields and `steps`, a nest of
        `[T, ...]` tensors.
      frame_formats: The formats of the step fields holding encoded frames, by path.

    Returns:
      An RLDS dataset: the same episodes with `steps` as a `tf.data.Dataset` of steps.
    """
    return EpisodeDataset(sources.DatasetSource(whole_episodes), frame_formats=frame_formats)


def find_frame_formats(episodes: tf.data.Dataset) -> dict[str, FrameFormat]:
    """Returns the formats of the step fields of `episodes` that hold encoded frames.

    Empty for a dataset read with its frames decoded (the default of `load`), and for a
    plain `tf.data.Dataset` (which carries no formats: give functions `frame_formats=`).

    Example:
      >>> find_frame_formats(rlds_reverb.load(path, encoded_frames='all'))
      {'observation/image': FrameFormat(codec='jpeg', shape=(256, 320, 3))}
    """
    return episodes.frame_formats if isinstance(episodes, EpisodeDataset) else {}


def find_source(episodes: tf.data.Dataset) -> sources.EpisodeSource | None:
    """Returns the source `episodes` reads whole, or None for a dataset read step by step."""
    return episodes.source if isinstance(episodes, EpisodeDataset) else None


def has_whole_episodes(episodes: tf.data.Dataset) -> bool:
    """Returns whether `episodes`' whole-episode tensors are at hand (no nested steps read)."""
    return isinstance(episodes, EpisodeDataset)


def to_whole_episodes(episodes: tf.data.Dataset) -> tf.data.Dataset:
    """Maps an RLDS dataset to its episodes with `steps` as a nest of `[T, ...]` tensors.

    Episode-level fields (metadata) are kept. For an `EpisodeDataset` (what
    `rlds_reverb.load` returns for a TFDS source, its `take`/`skip`/`shard`, an adder's
    output), the tensors its source reads are used directly.

    Args:
      episodes: An RLDS dataset.

    Returns:
      A dataset with one dict per episode: its episode-level fields and `steps`.
    """
    if isinstance(episodes, EpisodeDataset):
        return episodes.whole_episodes
    return episodes.map(
        without_autograph(lambda e: {**e, types.STEPS: batch_steps(e[types.STEPS])}),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )


def to_episode_tensors(episodes: tf.data.Dataset) -> tf.data.Dataset:
    """Maps an RLDS dataset to a dataset of whole-episode step tensors.

    Args:
      episodes: An RLDS dataset.

    Returns:
      A dataset with one element per episode (empty episodes included, with T = 0): the
      episode's steps as a nest of `[T, ...]` tensors.
    """
    if isinstance(episodes, EpisodeDataset):
        return episodes.whole_episodes.map(without_autograph(lambda e: e[types.STEPS]))
    return episodes.map(
        without_autograph(lambda episode: batch_steps(episode[types.STEPS])),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )


def episode_length(steps: types.Nest) -> tf.Tensor:
    """Returns T, the number of steps of a whole-episode nest (an int32 scalar)."""
    is_first = steps[types.IS_FIRST]
    if is_first.shape.rank == 1:  # One op instead of five (every traced op costs set-up).
        return tf.size(is_first)
    return tf.shape(is_first)[0]


def expand_like(x: tf.Tensor, like: tf.Tensor) -> tf.Tensor:
    """Reshapes `x` (`[T]` or `[W, L]`) with trailing size-1 axes to broadcast against `like`."""
    missing = like.shape.rank - x.shape.rank
    if missing == 0:
        return x
    return tf.reshape(x, tf.concat([tf.shape(x), tf.ones([missing], tf.int32)], 0))


def gather_windows(steps: types.Nest, index: tf.Tensor, valid: tf.Tensor) -> types.Nest:
    """Returns `steps` gathered at `index` along time, zero where `valid` is false.

    The one masked window gather of the package: sequence windows, padded items and the
    item batches a priority function sees are all built with it.

    Args:
      steps: Whole-episode `[T, ...]` tensors (any nest).
      index: int32 indices into the time axis, any shape (`[W, L]` for windows, `[N]`
        for single rows); every index must be in range, even where not valid.
      valid: bool, `index`'s shape: false marks padding.

    Returns:
      The nest with leaves `[*index.shape, ...]`; padding leaves are zeros.
    """

    def _gather(x: tf.Tensor) -> tf.Tensor:
        gathered = tf.gather(x, index)
        return tf.where(expand_like(valid, gathered), gathered, tf.zeros_like(gathered))

    return tf.nest.map_structure(_gather, steps)


def compute_terminal_discounts(steps: types.Nest) -> types.Nest:
    """Returns one episode's discounts with the flags' termination applied (docs/semantics.md §3).

    The transition into a terminal step (`is_terminal` on the next step) and a terminal
    last step get discount 0, whatever the data says; every other discount is the data's.
    Two-step trajectories and sequence and episode items all use this, so that none of them
    bootstraps from a terminal state on data that leaves d_{L-1} at 1 (Open X-Embodiment).

    Args:
      steps: One episode's steps as whole `[T, ...]` tensors, with `discount`, `is_last` and
        `is_terminal`.

    Returns:
      The `discount` nest, same structure, shapes and dtypes.

    Example:
      >>> compute_terminal_discounts(steps)  # data [1, 1, 1], terminated -> [1, 0, 0]
    """
    terminal = steps[types.IS_TERMINAL]
    # A constant `[False]` traces one op where `zeros_like(terminal[:1])` traces five.
    into_terminal = tf.concat([terminal[1:], tf.constant([False])], axis=0)
    zero = (steps[types.IS_LAST] & terminal) | into_terminal

    def _discount(d: tf.Tensor) -> tf.Tensor:
        return tf.where(expand_like(zero, d), tf.zeros_like(d), d)

    return tf.nest.map_structure(_discount, steps[types.DISCOUNT])


def apply_terminal_discounts(steps: types.Nest) -> types.Nest:
    """Returns `steps` with `compute_terminal_discounts` as `discount` (unchanged without one).

    Example:
      >>> rows = apply_terminal_discounts(steps)
    """
    if not all(f in steps for f in (types.DISCOUNT, types.IS_LAST, types.IS_TERMINAL)):
        return steps
    return {**steps, types.DISCOUNT: compute_terminal_discounts(steps)}
