"""The TFDS reader: a TFDS dataset directory or name, read as whole episodes (envlogger too).

A TFDS source is read as whole episodes: TFDS decodes each episode's steps in one batch
(images and other encoded features included) straight into `[T, ...]` tensors, without the
per-step nested dataset, and the toolkit's functions given the returned dataset use those
tensors (`core.episodes.to_whole_episodes`). Users still see an RLDS dataset: an
`EpisodeDataset` carrying its source (`core.sources`); its `.take`, `.skip` and `.shard`
select from the source and stay on this path, while any other transformation (`.map`) is
read through its nested steps, correctly but more slowly. `whole_episodes=False` reads the
nested steps as TFDS gives them. The default read of TFRecord shards (no `read_config`, no
file shuffling) goes straight from the shards to whole episodes in one map
(`rlds_reverb.read.records`: TFDS' own file instructions, order and parser), which halves
the set-up of `as_dataset` and a second decoding map; any other read goes through TFDS'
`as_dataset`, with the same episodes.

Step fields left out by `step_fields=` are never decoded, which is where images cost. Frame
fields named by `encoded_frames=` (`rlds_reverb.read.frame_fields`) are not decoded either:
each is handed out as the `[T]` `tf.string` of bytes the records hold (TFDS stores an
`Image` feature as its encoded bytes), and the returned dataset carries their formats
(`frame_formats`). An envlogger recording is a TFDS directory written by TFDS' sequential
writer: this reader reads it, and names a shard a killed recording left unlisted
(`integrity`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds
import tree

from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import sources, types
from rlds_reverb.core.errors import SourceError
from rlds_reverb.core.frames import FrameFormat
from rlds_reverb.read import frame_fields, integrity, records, step_fields, tfds_dirs
from rlds_reverb.read.options import LoadOptions

__all__ = ['TfdsReader']

# TFDS' own errors when a split cannot be read.
_SPLIT_ERRORS = (ValueError, KeyError, AssertionError, tf.errors.OpError)
_ADVICE = (
    'Leave the field out with step_fields=, or read the nested steps with '
    'load(..., whole_episodes=False).'
)


class TfdsReader:
    """Reads a TFDS dataset directory (or a parent of its versions) or a TFDS dataset name.

    It recognizes any path or string (so it is asked last): what is not a TFDS dataset is
    named in its error. Every `LoadOptions` field applies.
    """

    name = 'tfds'
    accepts = frozenset(
        {'split', 'data_dir', 'shuffle_files', 'read_config', 'check_files', 'step_fields',
         'whole_episodes', 'encoded_frames'}
    )  # fmt: skip

    def recognizes(self, source: Any) -> bool:
        """Returns whether `source` is a path or a string (a directory or a TFDS name)."""
        return isinstance(source, str | os.PathLike)

    def open(self, source: Any, options: LoadOptions) -> tf.data.Dataset:
        """Returns the split's episodes (see the module docstring).

        Raises:
          SourceNotFoundError: If the path does not exist or no dataset has that name.
          SourceError: If the source is not an RLDS dataset, the split is unknown, a shard
            is missing, truncated or corrupt, or a step feature cannot be read whole.
          SpecMismatchError: If a required step field other than `discount` is missing.
        """
        builder, where = tfds_dirs.open_builder_and_describe(source, data_dir=options.data_dir)
        _check_rlds_features(builder, where=where)
        split_names = integrity.check_split(builder, options.split, where=where)
        if options.check_files:
            for name in split_names:
                integrity.check_shards(
                    builder, name, where=where, full=options.check_files == 'full'
                )
        encoded = _choose_encoded(builder, options, where=where)
        if options.whole_episodes:
            episodes = _read_whole_episodes(builder, options, encoded, where=where)
            step_fields.check_step_spec(episodes, where=where)
            return episodes
        decoders = {types.STEPS: frame_fields.skip_decoding(encoded)} if encoded else None
        try:
            nested = builder.as_dataset(
                split=options.split,
                shuffle_files=options.shuffle_files,
                read_config=options.read_config,
                decoders=decoders,
            )
        except _SPLIT_ERRORS as e:
            raise SourceError(f'Could not read split {options.split!r} of {where}: {e}') from e
        selected = step_fields.select_in_steps(nested, options.step_paths, where=where)
        return step_fields.check_episodes(selected, where=where)

    def list_frame_fields(self, source: Any, options: LoadOptions) -> dict[str, FrameFormat]:
        """Returns the frame fields of the source's steps, from its features alone.

        Raises:
          SourceNotFoundError: If the path does not exist or no dataset has that name.
          SourceError: If the source is not an RLDS dataset.
        """
        builder, where = tfds_dirs.open_builder_and_describe(source, data_dir=options.data_dir)
        _check_rlds_features(builder, where=where)
        return frame_fields.list_step_frame_fields(builder.info.features[types.STEPS].feature)


def _choose_encoded(
    builder: tfds.core.DatasetBuilder, options: LoadOptions, *, where: str
) -> dict[str, FrameFormat]:
    """Returns the formats of the selected step fields that stay encoded."""
    if options.encoded_frames is None:
        return {}
    selected = step_fields.select_step_fields(
        builder.info.features[types.STEPS].feature, options.step_paths, where=where
    )
    available = frame_fields.list_step_frame_fields(selected)
    return frame_fields.choose_encoded(options.encoded_frames, available, where=where)


def _check_rlds_features(builder: tfds.core.DatasetBuilder, *, where: str) -> None:
    """Raises `SourceError` unless the dataset's features hold a nested `steps` dataset."""
    features = builder.info.features
    steps = features[types.STEPS] if types.STEPS in (features or {}) else None
    if not isinstance(steps, tfds.features.Dataset):
        found = (
            sorted(features.keys())
            if isinstance(features, tfds.features.FeaturesDict)
            else features
        )
        raise SourceError(
            f'{where} is a TFDS dataset but not an RLDS dataset: expected a '
            f"'{types.STEPS}' feature of type tfds.features.Dataset, found features {found}."
        )


def _make_step_decoder(
    builder: tfds.core.DatasetBuilder,
    options: LoadOptions,
    encoded: Mapping[str, FrameFormat],
    *,
    where: str,
) -> tuple[tfds.features.Sequence, Any]:
    """Returns the selected step features as one batch decoder, and the function that
    decodes an episode's parsed steps with it (counts checked, discount filled).

    The `encoded` frame fields are not decoded: their parsed `[T]` bytes are put back in
    the steps as they are.
    """
    paths = options.step_paths
    step_features = step_fields.select_step_fields(
        builder.info.features[types.STEPS].feature, paths, where=where
    )
    fill = step_fields.lacks_discount(step_features)
    step_features, _ = frame_fields.split_fields(step_features, encoded)
    # A Sequence decodes each field with its own batch decoder (a whole FeaturesDict would
    # decode step by step with tf.map_fn, ~10x slower here).
    decoder = tfds.features.Sequence(tfds.features.FeaturesDict(step_features))
    if fill:
        step_fields.warn_no_discount(where)

    def _decode_steps(raw: dict) -> dict:
        rest, taken = frame_fields.split_fields(
            step_fields.select_step_fields(raw, paths, where=where), encoded
        )
        steps = frame_fields.merge_fields(decoder.decode_example(rest), taken)
        steps = _check_step_counts(steps, where=where)
        return step_fields.fill_discount(steps) if fill else steps

    return decoder, episodes_lib.without_autograph(_decode_steps)


def _read_whole_episodes(
    builder: tfds.core.DatasetBuilder,
    options: LoadOptions,
    encoded: Mapping[str, FrameFormat],
    *,
    where: str,
) -> episodes_lib.EpisodeDataset:
    """Returns the split's episodes, read as whole `[T, ...]` tensors from their source.

    The source is the split's TFRecord shards (`records.RecordSource`) for the default read,
    else TFDS' `as_dataset` with `steps` left encoded (a `DatasetSource`). Either way each
    episode's step features are decoded as one batch (`decode_batch_example`: images and
    other encoded features decoded per step inside one op), only for the selected fields,
    and only for the episodes a `take`, `skip` or `shard` keeps.
    """
    decoder, decode_steps = _make_step_decoder(builder, options, encoded, where=where)
    serialized_steps = step_fields.select_step_fields(
        builder.info.features[types.STEPS].get_serialized_info(), options.step_paths, where=where
    )
    try:
        if records.can_read_records(
            builder, shuffle_files=options.shuffle_files, read_config=options.read_config
        ):
            try:
                source = records.make_record_source(
                    builder,
                    split=options.split,
                    serialized_steps=serialized_steps,
                    decode_steps=decode_steps,
                )
                return episodes_lib.from_source(source, frame_formats=encoded)
            except _SPLIT_ERRORS:
                pass  # A split TFDS resolves itself (such as 'all'): as_dataset reads it.
        parsed = _read_encoded_steps(builder, options, where=where)
        decode = episodes_lib.without_autograph(
            lambda episode: {**episode, types.STEPS: decode_steps(episode[types.STEPS])}
        )
        return episodes_lib.from_source(
            sources.DatasetSource(parsed, decode), frame_formats=encoded
        )
    except SourceError:
        raise
    except Exception:  # Tracing failed: find and name the field (traced alone, once each).
        parsed = _read_encoded_steps(builder, options, where=where)
        encoded_spec = step_fields.select_step_fields(
            parsed.element_spec[types.STEPS], options.step_paths, where=where
        )
        _check_decodable(decoder, encoded_spec, where=where)
        raise


def _read_encoded_steps(
    builder: tfds.core.DatasetBuilder, options: LoadOptions, *, where: str
) -> tf.data.Dataset:
    """Returns TFDS' episodes with `steps` left encoded (as parsed, not decoded)."""
    try:
        return builder.as_dataset(
            split=options.split,
            shuffle_files=options.shuffle_files,
            read_config=options.read_config,
            decoders={types.STEPS: tfds.decode.SkipDecoding()},
        )
    except _SPLIT_ERRORS as e:
        raise SourceError(f'Could not read split {options.split!r} of {where}: {e}') from e


def _check_step_counts(steps: dict, *, where: str) -> dict:
    """Returns `steps`, failing while read if a field's step count differs from the others'.

    A record that lacks a step field (written under other features) decodes it with zero
    steps; the nested reader failed there too, without naming the field. Every traced op
    costs set-up time (about 0.6 ms each with pure-Python protobuf), so one `Assert` checks
    every field from one concatenation of their shapes, and its message lists each field
    with its step count.
    """
    flat = tree.flatten_with_path(steps)
    leaves = [x for _, x in flat]
    not_tensors = [x for x in leaves if not isinstance(x, tf.Tensor | tf.RaggedTensor)]
    if not_tensors:  # Such as a Dataset per step: load names the field (_check_decodable).
        raise TypeError(f'a step field decodes to a {type(not_tensors[0]).__name__}')
    if not all(isinstance(x, tf.Tensor) and x.shape.rank for x in leaves):
        return steps  # Ragged or unknown rank: slicing the steps fails on uneven counts.
    names = tf.constant(['/'.join(map(str, path)) for path, _ in flat])
    # The leading dimension of each leaf, gathered from all their shapes at once.
    starts = np.cumsum([0] + [x.shape.rank for x in leaves[:-1]])
    counts = tf.gather(tf.concat([tf.shape(x) for x in leaves], axis=0), starts)
    check = tf.debugging.Assert(
        tf.equal(tf.reduce_min(counts), tf.reduce_max(counts)),
        [
            f"{where}: an episode's step field has a different number of steps than its "
            f"'{types.IS_FIRST}' flags, so the record is not a valid episode (a field missing "
            "from it?). load(..., check_files='full') names the shard and record. Fields and "
            'their step counts:',
            names,
            counts,
        ],
        summarize=len(leaves),
    )
    # tf.data functions run their stateful ops (the Assert) with every element, so the
    # steps need no control dependency on it (one Identity per field).
    del check
    return steps


def _make_decode_probe(sequence: tfds.features.Sequence, not_tensors: list[str]):
    """Returns a function decoding one field's steps that lists non-tensor outputs."""

    def _probe(raw):
        decoded = sequence.decode_example(raw)
        not_tensors.extend(
            type(leaf).__name__
            for leaf in tf.nest.flatten(decoded)
            if not isinstance(leaf, tf.Tensor)
        )
        return tf.constant(0)

    return _probe


def _check_decodable(decoder: tfds.features.Sequence, encoded_spec: Mapping, *, where: str) -> None:
    """Raises `SourceError` naming the step feature that cannot be decoded as a batch.

    A feature fails when its batch decoder does not trace, or when it decodes to something
    other than tensors (a `tfds.features.Dataset` inside each step decodes to datasets).
    """
    for name, feature in decoder.feature.items():
        sequence = tfds.features.Sequence(feature)
        not_tensors: list[str] = []
        probe = tf.function(_make_decode_probe(sequence, not_tensors))
        try:
            probe.get_concrete_function(encoded_spec[name])
        except Exception as e:  # TFDS features raise many types for unsupported data.
            raise SourceError(
                f'{where}: step field {name!r} ({type(feature).__name__}) cannot be decoded '
                f'as a whole episode ({type(e).__name__}: {e}). {_ADVICE}'
            ) from e
        if not_tensors:
            raise SourceError(
                f'{where}: step field {name!r} ({type(feature).__name__}) decodes to a '
                f'{not_tensors[0]} in each step, not to a tensor, so its steps cannot be held '
                f'as one episode tensor (and no transform of the toolkit takes it). {_ADVICE}'
            )
