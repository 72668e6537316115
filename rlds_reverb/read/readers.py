"""What a reader is: how it recognizes a source, how it opens it, which options it accepts.

`rlds_reverb.load(source, ...)` asks its readers in order (`loading.list_readers`) and the
first that recognizes the source opens it with the one `LoadOptions` value. A reader
declares the options it accepts (`accepts`: names of `LoadOptions` fields); `load` refuses
any other option given with a value other than its default, naming the option, the reader
and what it accepts, before the reader is called. A reader written outside the package is
registered with `rlds_reverb.read.loading.register_reader` (docs/datasets.md, "Readers").

A reader returns an RLDS dataset (see `rlds_reverb.core.types`): an `EpisodeDataset` on a
source where it can (`core.sources`: its `take`, `skip` and `shard` then select from the
source, so unselected episodes are never read), else any `tf.data.Dataset` of episodes
whose steps are a dataset. `finish_episodes` is the common tail every reader may end with:
it keeps the `step_fields` asked for, fills a missing `discount` with 1.0 (warning once),
and checks that every required step field is there, naming the source.

A reader whose sources hold encoded frames (image features) accepts `encoded_frames` and
has one more method, `list_frame_fields(source, options) -> {path: FrameFormat}` (from the
source's features, no data read), which `loading.list_frame_fields` calls; what it returns
for `encoded_frames` carries the formats (`core.episodes.from_source(...,
frame_formats=...)`).

Example, a reader of one episode per `.npz` file (the tests have a complete one):

    class NpzReader:
        name = 'npz'
        accepts = frozenset({'split', 'step_fields'})

        def recognizes(self, source):
            return isinstance(source, str) and source.endswith('.npz')

        def open(self, source, options):
            whole = tf.data.Dataset.from_tensors({'steps': dict(np.load(source))})
            episodes = episodes_lib.from_whole_episodes(whole)
            return finish_episodes(episodes, options, where=f'the episode in {source}')
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import tensorflow as tf

from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import sources, types
from rlds_reverb.read import step_fields
from rlds_reverb.read.options import LoadOptions

__all__ = ['Reader', 'finish_episodes']


@runtime_checkable
class Reader(Protocol):
    """A kind of source `rlds_reverb.load` opens.

    Attributes:
      name: A short name, unique among the registered readers ('tfds', 'minari', ...):
        messages name the reader by it.
      accepts: The `LoadOptions` fields this reader honours. Any other option must keep
        its default for this reader's sources; `load` refuses it otherwise.
    """

    @property
    def name(self) -> str:
        """A short name, unique among the registered readers."""

    @property
    def accepts(self) -> frozenset[str]:
        """The names of the `LoadOptions` fields this reader honours."""

    def recognizes(self, source: Any) -> bool:
        """Returns whether this reader opens `source` (cheap: no data read, never raises)."""

    def open(self, source: Any, options: LoadOptions) -> tf.data.Dataset:
        """Returns `source`'s episodes as an RLDS dataset, as `options` ask.

        Only the options in `accepts` can differ from their defaults here.
        """


def finish_episodes(
    episodes: tf.data.Dataset, options: LoadOptions, *, where: str
) -> tf.data.Dataset:
    """Returns a reader's episodes with `options.step_fields` kept, `discount` filled in, and
    every required step field checked.

    An `EpisodeDataset` stays one: the fields are kept and the discount filled in one map
    after its source's reading (and selection), so `take`, `skip` and `shard` still select
    from the source. Any other RLDS dataset is mapped through its nested steps.

    Args:
      episodes: The reader's episodes: an RLDS dataset (steps as a `tf.data.Dataset`), or
        an `EpisodeDataset` (`core.episodes.from_source`, `from_whole_episodes`).
      options: The options the reader was given.
      where: The source, as messages name it ('the Minari dataset at ...').

    Returns:
      The RLDS dataset `load` returns.

    Raises:
      SourceError: If `episodes` is not an RLDS dataset (no `steps` dataset).
      SpecMismatchError: If a required step field other than `discount` is missing, or
        `step_fields` names a field the steps do not have.

    Example:
      >>> finish_episodes(episodes_lib.from_whole_episodes(whole), options, where='my files')
    """
    paths = options.step_paths
    if not isinstance(episodes, episodes_lib.EpisodeDataset):
        selected = step_fields.select_in_steps(episodes, paths, where=where)
        return step_fields.check_episodes(selected, where=where)
    step_spec = episodes.element_spec[types.STEPS].element_spec
    kept = step_fields.select_step_fields(step_spec, paths, where=where)  # Names a wrong path.
    fill = step_fields.lacks_discount(kept)
    if fill:
        step_fields.warn_no_discount(where)
    if paths is not None or fill:

        def _finish(episode: dict) -> dict:
            steps = step_fields.select_step_fields(episode[types.STEPS], paths, where=where)
            return {**episode, types.STEPS: step_fields.fill_discount(steps) if fill else steps}

        mapped = sources.MappedSource(episodes.source, episodes_lib.without_autograph(_finish))
        episodes = episodes_lib.from_source(mapped, frame_formats=episodes.frame_formats)
    step_fields.check_step_spec(episodes, where=where)
    return episodes
