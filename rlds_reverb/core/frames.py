"""Frames that stay encoded: their formats, the spec-name grammar, and the in-graph decode.

Robot datasets store camera frames as JPEG or PNG bytes (a TFDS `Image` feature). Read
with `load(..., encoded_frames=...)`, such a step field stays a `tf.string` `[T]` tensor
holding the stored bytes, unchanged, and is decoded where it is used. Its `FrameFormat`
(codec and decoded shape) travels with it: on what `load` returns
(`EpisodeDataset.frame_formats`, `core.episodes.find_frame_formats`), and in a Reverb table
signature, as the `name` of the field's `tf.TensorSpec`:

    frame.<codec>.<height>x<width>x<channels>      e.g. frame.jpeg.256x320x3

`<codec>` is `jpeg` or `png`; an unknown height or width is written `_`
(`frame.png._x_x3`). The name is a valid TensorFlow node name (a `:` would not be), and
Reverb keeps spec names in its signatures and checkpoints, so a table says by itself which
of its fields hold encoded frames (`find_spec_formats`).

`FrameFormats` maps a field's `/` path (`'observation/image'`) to its format. Decoding
(`decode_frames`) turns `[...]` bytes into `[..., H, W, C]` uint8 frames with TFDS' own op
and arguments (`tf.image.decode_image(..., channels=C, dtype=tf.uint8)`, as TFDS 4.9.4's
`Image` feature decodes), so a frame decoded here is bit for bit the frame `load` decodes
without `encoded_frames`. An empty string (a camera a step lacks) decodes to a zero frame,
and a bool mask says which frames were there.

This module loads without TensorFlow (`rlds-reverb info` reads formats from the files
alone); the decode functions import it when called.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import tensorflow as tf

__all__ = [
    'ALL',
    'CODECS',
    'FrameFormat',
    'FrameFn',
    'FrameFormats',
    'FrameSelection',
    'decode_fields',
    'decode_frames',
    'decode_spec',
    'describe_formats',
    'diff_frame_fields',
    'find_spec_formats',
    'join_path',
    'name_frame_specs',
    'select_formats',
]

# The codecs of a TFDS `Image` feature (its `encoding_format`; TFDS' default is PNG).
CODECS = ('jpeg', 'png')
_PREFIX = 'frame'
_UNKNOWN = '_'
_NAME = re.compile(r'^frame\.(jpeg|png)\.(\d+|_)x(\d+|_)x(\d+)$')
_SEPARATOR = '/'


def join_path(path: Iterable[Any]) -> str:
    """Returns the `/` path of a nest leaf's key path (tuple and list positions left out).

    A `Trajectory`'s fields count by name, a dict's by key; positions (a sample's
    `(info, data)` tuple, say) are not part of a field's path.

    Example:
      >>> join_path(('observation', 'image'))
      'observation/image'
    """
    return _SEPARATOR.join(str(key) for key in path if not isinstance(key, int))


@dataclasses.dataclass(frozen=True)
class FrameFormat:
    """How one field's frames are encoded, and what they decode to (uint8 always).

    Attributes:
      codec: 'jpeg' or 'png'.
      shape: The decoded frame's (height, width, channels); height and width may be None
        (frames of varying size).

    Raises:
      ValueError: If `codec` is not 'jpeg' or 'png', or `shape` is not (height, width,
        channels) with positive sizes (channels known).

    Example:
      >>> FrameFormat('jpeg', (256, 320, 3)).spec_name
      'frame.jpeg.256x320x3'
    """

    codec: str
    shape: tuple[int | None, int | None, int]

    def __post_init__(self) -> None:
        if self.codec not in CODECS:
            raise ValueError(f'codec={self.codec!r} is not valid; expected one of {CODECS}.')
        shape = tuple(self.shape)
        sizes_ok = all(d is None or (isinstance(d, int) and d > 0) for d in shape[:2])
        if len(shape) != 3 or not sizes_ok or not isinstance(shape[2], int) or shape[2] < 1:
            raise ValueError(
                f'shape={self.shape!r} is not valid; expected (height, width, channels), '
                'positive sizes, height and width possibly None.'
            )
        object.__setattr__(self, 'shape', shape)

    @property
    def spec_name(self) -> str:
        """The `tf.TensorSpec` name that records this format in a table signature."""
        height, width, channels = (_UNKNOWN if d is None else str(d) for d in self.shape)
        return f'{_PREFIX}.{self.codec}.{height}x{width}x{channels}'

    @classmethod
    def parse(cls, name: str | None) -> FrameFormat | None:
        """Returns the format a spec name records, or None if it records none.

        Example:
          >>> FrameFormat.parse('frame.png._x_x3')
          FrameFormat(codec='png', shape=(None, None, 3))
        """
        found = _NAME.match(name or '')
        if found is None:
            return None
        codec, *dims = found.groups()
        height, width, channels = (None if d == _UNKNOWN else int(d) for d in dims)
        return cls(codec, (height, width, channels))  # type: ignore[arg-type]

    def describe(self) -> str:
        """Returns e.g. 'jpeg 256x320x3' (unknown sizes as '?')."""
        return f'{self.codec} ' + 'x'.join('?' if d is None else str(d) for d in self.shape)


FrameFormats = Mapping[str, FrameFormat]
# What is done to each frame right after it is decoded: `[H, W, C]` uint8 -> uint8.
FrameFn = Callable[['tf.Tensor'], 'tf.Tensor']
# Which frame fields a function decodes: every one ('all'), or these `/` paths (none: ()).
FrameSelection = Literal['all'] | Sequence[str]
ALL = 'all'


def select_formats(
    formats: FrameFormats, selection: FrameSelection | None, *, argument: str, where=None
) -> dict[str, FrameFormat]:
    """Returns the formats of the fields `selection` names (all of them for 'all').

    The one frame-field selector: of a source's Image features for `load(...,
    encoded_frames=)` (`where` names it), of a dataset's or table's frame fields else.

    Args:
      formats: The frame fields there are.
      selection: 'all', or `/` paths among `formats` (None or `()`: none).
      argument: The argument's name, for the message.
      where: The source being read, for the message of a load's option.

    Raises:
      FrameFieldError: If a path is not among `formats`; lists those that are.

    Example:
      >>> select_formats(formats, ['observation/image'], argument='decode_frames')
    """
    if selection is None:
        return {}
    if selection == ALL:
        return dict(formats)
    if isinstance(selection, str) or not all(isinstance(p, str) for p in selection):
        raise TypeError(
            f"{argument} must be 'all' or a sequence of frame field paths such as "
            f"['observation/image']; got {selection!r}."
        )
    chosen = {}
    for path in selection:
        key = path.strip(_SEPARATOR)
        if key not in formats:
            from rlds_reverb.core.errors import FrameFieldError  # Its module loads TensorFlow.

            raise FrameFieldError(_describe_unknown(formats, path, argument, where))
        chosen[key] = formats[key]
    return chosen


def _describe_unknown(formats: FrameFormats, path: str, argument: str, where: str | None) -> str:
    listed = ', '.join(sorted(formats)) or 'none'
    if where is not None:  # A source's option: its frame fields are Image features.
        return (
            f'{where}: {argument} names {path!r}, which is not a frame field (an Image feature '
            f'of uint8 JPEG or PNG frames) among its step fields. Its frame fields: {listed}.'
        )
    return (
        f'{argument} names {path!r}, which is not a field holding encoded frames. Frame fields: '
        f'{listed}. Fields read with load(..., encoded_frames=...) hold them; give '
        'frame_formats= for a plain tf.data pipeline.'
    )


def describe_formats(formats: FrameFormats) -> str:
    """Returns the formats in one line, by path: `observation/image (jpeg 256x320x3), ...`.

    Example:
      >>> describe_formats({'observation/image': FrameFormat('jpeg', (256, 320, 3))})
      'observation/image (jpeg 256x320x3)'
    """
    return ', '.join(f'{path} ({fmt.describe()})' for path, fmt in sorted(formats.items()))


def find_spec_formats(spec: Any) -> dict[str, FrameFormat]:
    """Returns the frame formats a spec nest records in its leaves' names, by path.

    Args:
      spec: A nest of `tf.TensorSpec`s, such as a Reverb table's signature.

    Returns:
      `{path: FrameFormat}` of every `tf.string` leaf whose name follows the grammar.

    Example:
      >>> find_spec_formats(client.server_info()['replay'].signature)
      {'observation/image': FrameFormat(codec='jpeg', shape=(256, 320, 3))}
    """
    import tree

    found = {}
    for path, leaf in tree.flatten_with_path(spec):
        fmt = FrameFormat.parse(getattr(leaf, 'name', None))
        if fmt is not None and getattr(leaf, 'dtype', None) == _string_dtype():
            found[join_path(path)] = fmt
    return found


def diff_frame_fields(expected: Any, found: Any) -> list[str]:
    """Returns a line per frame field two spec nests disagree on (empty if none).

    A field disagrees when one side holds it encoded (a `tf.string` named by the grammar)
    and the other decoded (not a string), or both encoded in different formats. A string
    without a frame name on one side (a plain `tf.data` pipeline of bytes) agrees.

    Example:
      >>> diff_frame_fields(table_signature, item_spec)
      ['observation/image: expected encoded frames (jpeg 256x320x3), found decoded uint8[...]']
    """
    import tree

    expected_formats, found_formats = find_spec_formats(expected), find_spec_formats(found)
    expected_leaves = {join_path(p): leaf for p, leaf in tree.flatten_with_path(expected)}
    found_leaves = {join_path(p): leaf for p, leaf in tree.flatten_with_path(found)}
    lines = []
    for path in sorted(set(expected_formats) | set(found_formats)):
        want, got = expected_formats.get(path), found_formats.get(path)
        if want is not None and got is not None:
            if want != got:
                lines.append(f'{path}: expected {want.describe()} frames, found {got.describe()}')
        elif want is not None and _is_decoded(found_leaves.get(path)):
            lines.append(
                f'{path}: expected encoded frames ({want.describe()}), found decoded '
                f'{_describe_leaf(found_leaves[path])}'
            )
        elif got is not None and _is_decoded(expected_leaves.get(path)):
            lines.append(
                f'{path}: expected decoded {_describe_leaf(expected_leaves[path])}, found '
                f'encoded frames ({got.describe()})'
            )
    return lines


def _is_decoded(leaf: Any) -> bool:
    return leaf is not None and getattr(leaf, 'dtype', None) not in (None, _string_dtype())


def _describe_leaf(leaf: Any) -> str:
    return f'{leaf.dtype.name}{list(leaf.shape)}'


def name_frame_specs(spec: Any, formats: FrameFormats) -> Any:
    """Returns `spec` with each `tf.string` leaf at a path of `formats` named by its format.

    Args:
      spec: A nest of `tf.TensorSpec`s (an item spec, a table signature).
      formats: The frame formats by path (`join_path` of the leaf's key path).

    Returns:
      The same nest; leaves not in `formats` (or not strings) are unchanged.

    Example:
      >>> signature = name_frame_specs(item_spec, {'observation/image': jpeg_format})
    """
    if not formats:
        return spec
    import tensorflow as tf
    import tree

    def _name(path, leaf):
        fmt = formats.get(join_path(path))
        if fmt is None or not isinstance(leaf, tf.TensorSpec) or leaf.dtype != tf.string:
            return leaf
        return tf.TensorSpec(leaf.shape, leaf.dtype, name=fmt.spec_name)

    return tree.map_structure_with_path(_name, spec)


def _string_dtype():
    import tensorflow as tf

    return tf.string


def _decode_one(
    encoded: tf.Tensor, fmt: FrameFormat, frame_fn: FrameFn | None, shape: tuple
) -> tf.Tensor:
    """Decodes one frame as TFDS' `Image` feature does, then `frame_fn`; an empty string
    gives zeros of the output's shape."""
    import tensorflow as tf

    def _decode() -> tf.Tensor:
        # TFDS 4.9.4, image_feature._ImageEncoder.decode_image: this op, these arguments.
        frame = tf.image.decode_image(encoded, channels=fmt.shape[2], dtype=tf.uint8)
        frame.set_shape(fmt.shape)
        return frame if frame_fn is None else frame_fn(frame)

    zeros = tf.zeros([d or 0 for d in shape], tf.uint8)
    return tf.cond(tf.strings.length(encoded) > 0, _decode, lambda: zeros)


def decode_frames(
    encoded: tf.Tensor,
    fmt: FrameFormat,
    *,
    frame_fn: FrameFn | None = None,
    frame_shape: tuple[int | None, ...] | None = None,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Decodes a tensor of encoded frames, every frame in parallel; usable in `tf.data` maps.

    The frames are decoded by a parallel `tf.data` map nested in the caller's graph (two to
    three times `tf.map_fn`'s rate here, as fast as a parallel map over single frames:
    benchmarks/frames.py), in order.

    Args:
      encoded: `[...]` `tf.string`: JPEG or PNG bytes, or empty strings for missing frames.
      fmt: Their format.
      frame_fn: Applied to each decoded `[H, W, C]` uint8 frame in the same parallel map
        (a crop, a resize: `rlds_reverb.transform.frames`); it must return uint8.
      frame_shape: The shape `frame_fn` returns (the zeros of a missing frame have it);
        default `fmt.shape`.

    Returns:
      `(frames, present)`: `[..., H, W, C]` uint8 frames (zeros where `encoded` is empty)
      and `[...]` bool, true where a frame was stored.

    Raises:
      tf.errors.InvalidArgumentError: When run, if a non-empty string is not an image, or
        decodes to another size than `fmt.shape`; or if the frames (or the zeros of a
        missing one) differ in size, as when `fmt` leaves the height or width unknown and
        no `frame_fn` makes them equal.

    Example:
      >>> encoded = steps['observation'].get('image')  # [T] tf.string
      >>> frames, present = decode_frames(encoded, jpeg_format)
    """
    import tensorflow as tf

    shape = tuple(fmt.shape if frame_shape is None else frame_shape)
    encoded = tf.convert_to_tensor(encoded, tf.string)
    flat = tf.reshape(encoded, [-1])
    count = tf.size(flat, out_type=tf.int64)
    decoded = tf.data.Dataset.from_tensor_slices(flat).map(
        lambda one: _decode_one(one, fmt, frame_fn, shape),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    # The exact count (a batch of 2**31 would reserve that much room for fixed-size
    # frames); a zero-size batch after it answers an empty input.
    empty = tf.data.Dataset.from_tensors(tf.zeros([0, *(d or 0 for d in shape)], tf.uint8))
    frames = decoded.batch(tf.maximum(count, 1)).concatenate(empty).take(1).get_single_element()
    frames = tf.reshape(frames, tf.concat([tf.shape(encoded), tf.shape(frames)[1:]], 0))
    frames.set_shape(encoded.shape.concatenate(shape))
    return frames, tf.strings.length(encoded) > 0


def decode_spec(spec: Any, formats: FrameFormats) -> Any:
    """Returns `spec` with the `tf.string` leaves at `formats`' paths as their decoded frames'
    spec: `[..., H, W, C]` uint8 (what `decode_fields` gives).

    Example:
      >>> decode_spec({'image': tf.TensorSpec([None], tf.string)}, {'image': jpeg})
      {'image': TensorSpec(shape=(None, 256, 320, 3), dtype=tf.uint8, name=None)}
    """
    if not formats:
        return spec
    import tensorflow as tf
    import tree

    def _decoded(path, leaf):
        fmt = formats.get(join_path(path))
        if fmt is None or getattr(leaf, 'dtype', None) != tf.string:
            return leaf
        return tf.TensorSpec(leaf.shape.concatenate(fmt.shape), tf.uint8)

    return tree.map_structure_with_path(_decoded, spec)


def decode_fields(
    nest: Any,
    formats: FrameFormats,
    *,
    present_suffix: str | None = None,
    frame_fns: Mapping[str, tuple[FrameFn, tuple]] | None = None,
) -> Any:
    """Returns `nest` with the encoded frames at `formats`' paths decoded (`decode_frames`).

    Dicts are walked by key, namedtuples (a `Trajectory`) by field name, tuples and lists by
    position (positions are not part of a path: `join_path`).

    Args:
      nest: A nest of tensors holding `[...]` `tf.string` leaves at (some of) the paths.
      formats: The formats of the leaves to decode, by path; paths the nest lacks are
        left out.
      present_suffix: If given, each decoded leaf gains a bool mask beside it, named by its
        key plus this suffix (in the same dict): true where a frame was stored.
      frame_fns: Per path, `(frame_fn, frame_shape)` applied to each frame as it is decoded
        (`decode_frames`).

    Raises:
      FrameFieldError: If `present_suffix` is given and a decoded leaf is not in a dict, or
        its mask's name is taken.

    Example:
      >>> steps = decode_fields(steps, {'observation/image': jpeg})
    """
    if not formats:
        return nest
    return _Decoding(formats, present_suffix, frame_fns or {}).walk(nest, ())


@dataclasses.dataclass(frozen=True)
class _Decoding:
    """One `decode_fields` walk: what to decode, and how."""

    formats: FrameFormats
    suffix: str | None
    frame_fns: Mapping[str, tuple[FrameFn, tuple]]

    def decode(self, value: Any, path: str) -> tuple[Any, Any]:
        frame_fn, shape = self.frame_fns.get(path, (None, None))
        return decode_frames(value, self.formats[path], frame_fn=frame_fn, frame_shape=shape)

    def walk(self, node: Any, prefix: tuple) -> Any:
        if isinstance(node, Mapping):
            out = {}
            for key, value in node.items():
                path = join_path((*prefix, key))
                if path in self.formats and _is_string(value):
                    out[key], present = self.decode(value, path)
                    if self.suffix is not None:
                        out[_mask_name(node, key, self.suffix, path)] = present
                else:
                    out[key] = self.walk(value, (*prefix, key))
            return out
        if _is_namedtuple(node):  # By field name.
            return node._replace(**{f: self.walk_field(node, f, prefix) for f in node._fields})
        if isinstance(node, tuple | list):
            return type(node)(self.walk(item, prefix) for item in node)
        return node

    def walk_field(self, node: Any, field: str, prefix: tuple) -> Any:
        """Decodes a namedtuple's field (no dict to put a mask in)."""
        value, path = getattr(node, field), join_path((*prefix, field))
        if path in self.formats and _is_string(value):
            if self.suffix is not None:
                _refuse_mask(path)
            return self.decode(value, path)[0]
        return self.walk(value, (*prefix, field))


def _is_namedtuple(node: Any) -> bool:
    return isinstance(node, tuple) and hasattr(node, '_fields')


def _is_string(value: Any) -> bool:
    return getattr(value, 'dtype', None) == _string_dtype()


def _mask_name(node: Mapping, key: str, suffix: str, path: str) -> str:
    name = f'{key}{suffix}'
    if name in node:
        from rlds_reverb.core.errors import FrameFieldError  # Its module loads TensorFlow.

        raise FrameFieldError(
            f'Cannot add the mask {name!r} of frame field {path!r}: a field of that name '
            'exists. Rename it, or decode without masks.'
        )
    return name


def _refuse_mask(path: str) -> None:
    from rlds_reverb.core.errors import FrameFieldError  # Its module loads TensorFlow.

    raise FrameFieldError(
        f'Cannot put the mask of frame field {path!r} beside it: it is not in a dict (the '
        'observation itself is the frame). Decode without masks.'
    )
