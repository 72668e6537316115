"""Image ops on camera frames: decode, resize, crop and augment, per camera, as `tf.data` maps.

Frames read encoded (`load(..., encoded_frames=...)`) stay bytes through adders, pushes and
sampling; these transforms decode them where they are used, and shape them per camera with
one mapping from field path to size:

    decode_frames(sizes={'observation/image': (128, 160)})     # decode, then resize
    crop_frames({'observation/image': (112, 144)}, mode='random', seed=0)
    resize_frames({'observation/wrist_image': (64, 64)})
    augment_frames(['observation/image'], brightness=0.1, contrast=(0.9, 1.1), flip=True,
                   seed=0)

Each returns a `dataset -> dataset` transform (`dataset.apply(...)`) over any of:

* RLDS episodes (`[T, ...]` step leaves: what `load` and the adders return; an
  `EpisodeDataset` stays one, keeping the formats of the fields it leaves encoded);
* trajectories or any other nest of tensors: TF-Agents `Trajectory`s from
  `convert_rlds_to_trajectories(..., decode_frames=())`, `[B, ...]` or `[B, T, ...]`
  batches sampled from Reverb, windows from `adders.sequences`.

A field is found by its `/` path in the element (dict keys and namedtuple field names;
tuple positions, such as a sample's `(info, data)`, are not part of it). Decoding is TFDS'
own (bit for bit what `load` decodes without `encoded_frames`), every frame of an element
in parallel, with any crop and resize in the same per-frame map. An empty string (a camera
a step lacks) becomes a zero frame, and `decode_frames` adds a bool mask beside each field,
`<field>_present` (`types.FRAME_PRESENT_SUFFIX`), false there.

The tensor ops they apply (`resize_images`, `crop_images`, `augment_images` on
`[..., H, W, C]` uint8 tensors) are in `rlds_reverb.transform.image_ops`, for use in a
pipeline's own maps. Crops and augmentations draw from stateless random ops seeded by `seed` and the element's
position in the dataset: the same seed and data give the same frames.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import tensorflow as tf
import tree

from rlds_reverb.core import checks, frames, types
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core.errors import FrameFieldError
from rlds_reverb.transform.image_ops import (
    CropMode,
    Size,
    augment_images,
    crop_images,
    resize_images,
)

__all__ = [
    'augment_frames',
    'crop_frames',
    'decode_frames',
    'resize_frames',
]

Transform = Callable[[tf.data.Dataset], tf.data.Dataset]
_RESIZE_METHODS = tuple(
    getattr(tf.image.ResizeMethod, name) for name in vars(tf.image.ResizeMethod) if name.isupper()
)


def _check_sizes(sizes: Mapping[str, Size] | None, *, argument: str) -> dict[str, Size]:
    """Returns `{path: (height, width)}` after checking every size is two ints >= 1."""
    if sizes is None:
        return {}
    if not isinstance(sizes, Mapping):
        raise TypeError(f'{argument} must map frame fields to (height, width); got {sizes!r}.')
    checked = {}
    for path, size in sizes.items():
        if isinstance(size, int) or len(size) != 2:
            raise ValueError(
                f'{argument}[{path!r}]={size!r} is not valid; expected (height, width).'
            )
        checked[path.strip('/')] = tuple(
            checks.check_int_at_least(d, 1, argument=f'{argument}[{path!r}]') for d in size
        )
    return checked  # type: ignore[return-value]


def _check_method(method: str) -> str:
    if method not in _RESIZE_METHODS:
        raise ValueError(f'method={method!r} is not valid; expected one of {_RESIZE_METHODS}.')
    return method


# --- Finding fields in elements ---------------------------------------------------------------


def _map_fields(node: Any, fns: Mapping[str, Callable[[Any], Any]], prefix: tuple = ()) -> Any:
    """Returns `node` with `fns[path](leaf)` at each path of `fns` (dicts by key, namedtuples
    by field name, tuples and lists by position)."""
    path = frames.join_path(prefix)
    if path in fns:
        return fns[path](node)
    if isinstance(node, Mapping):
        return {k: _map_fields(v, fns, (*prefix, k)) for k, v in node.items()}
    if isinstance(node, tuple) and hasattr(node, '_fields'):  # A namedtuple: by field name.
        named: Any = node
        fields = {f: _map_fields(getattr(named, f), fns, (*prefix, f)) for f in named._fields}
        return named._replace(**fields)
    if isinstance(node, tuple | list):
        return type(node)(_map_fields(item, fns, prefix) for item in node)
    return node


def _list_leaf_specs(spec: Any) -> dict[str, tf.TensorSpec]:
    return {frames.join_path(path): leaf for path, leaf in tree.flatten_with_path(spec)}


def _is_rlds(dataset: tf.data.Dataset) -> bool:
    spec = dataset.element_spec
    return isinstance(spec, dict) and isinstance(spec.get(types.STEPS), tf.data.DatasetSpec)


def _element_leaves(dataset: tf.data.Dataset) -> dict[str, tf.TensorSpec]:
    """Returns the leaves of one element (of the steps, for RLDS episodes), by path."""
    if _is_rlds(dataset):
        return _list_leaf_specs(dataset.element_spec[types.STEPS].element_spec)
    return _list_leaf_specs(dataset.element_spec)


def _check_frame_leaves(dataset: tf.data.Dataset, paths: Sequence[str], *, transform: str):
    """Raises `FrameFieldError` unless each path is a decoded `[..., H, W, C]` uint8 leaf."""
    leaves = _element_leaves(dataset)
    images = sorted(p for p, s in leaves.items() if s.dtype == tf.uint8 and s.shape.rank >= 3)
    for path in paths:
        if path in images:
            continue
        leaf = leaves.get(path)
        if leaf is None:
            what = 'is not a field of the elements'
        elif leaf.dtype == tf.string:
            what = 'holds encoded frames: decode_frames first'
        else:
            what = f'is not a uint8 [..., H, W, C] frame field ({leaf.dtype.name}{leaf.shape})'
        raise FrameFieldError(
            f'{transform}: {path!r} {what}. Decoded frame fields: {", ".join(images) or "none"}.'
        )


def _apply(
    dataset: tf.data.Dataset,
    element_fn: Callable[[Any, tf.Tensor], Any],
    *,
    formats: Mapping[str, frames.FrameFormat] | None = None,
) -> tf.data.Dataset:
    """Maps `element_fn(element, seed)` over a dataset's elements (RLDS: over each episode's
    whole steps), `seed` a `[2]` int64 tensor of the element's position.

    An RLDS dataset comes back as an `EpisodeDataset` whose frame formats are `formats`
    (default: the input's).
    """
    if formats is None:
        formats = episodes_lib.find_frame_formats(dataset)
    if _is_rlds(dataset):
        whole = episodes_lib.to_whole_episodes(dataset).enumerate()

        def _on_episode(index: tf.Tensor, episode: dict) -> dict:
            return {**episode, types.STEPS: element_fn(episode[types.STEPS], index)}

        mapped = whole.map(
            episodes_lib.without_autograph(_on_episode),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
        return episodes_lib.from_whole_episodes(mapped, frame_formats=formats)
    return dataset.enumerate().map(
        episodes_lib.without_autograph(lambda index, element: element_fn(element, index)),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )


def _seed_of(seed: int, index: tf.Tensor, field: int) -> tf.Tensor:
    """Returns the `[2]` seed of one field of the element at `index`."""
    base = tf.stack([tf.constant(seed, tf.int64), tf.cast(index, tf.int64)])
    return tf.random.experimental.stateless_fold_in(base, field)


# --- The transforms -----------------------------------------------------------------------------


def decode_frames(
    fields: frames.FrameSelection = frames.ALL,
    *,
    sizes: Mapping[str, Size] | None = None,
    method: str = 'bilinear',
    masks: bool = True,
    frame_formats: frames.FrameFormats | None = None,
) -> Transform:
    """Returns a transform decoding encoded frame fields (and resizing them, per camera).

    Each element's frames are decoded in parallel, as TFDS decodes them; a field in
    `sizes` is resized in the same per-frame map (antialiased, rounded to uint8). An empty
    string becomes a zero frame; with `masks`, a bool `<field>_present` beside the field
    says which frames were stored.

    Args:
      fields: 'all' (every encoded frame field), or the `/` paths of those to decode.
      sizes: `{path: (height, width)}` of the decoded fields to resize.
      method: `tf.image.resize`'s method ('bilinear', 'area', 'lanczos3', ...).
      masks: Whether to add the `<field>_present` masks (they need the field to sit in a
        dict: the mask goes beside it).
      frame_formats: The encoded fields' formats, by path; default: the dataset's
        (`core.episodes.find_frame_formats`); give them for other datasets (sampled
        batches: `core.frames.find_spec_formats(table_signature)`).

    Returns:
      A `dataset -> dataset` transform (see the module docstring for the datasets).

    Raises:
      FrameFieldError: When applied, if `fields` or `sizes` names a field that holds no
        encoded frames (lists those that do), or a mask cannot be added.
      ValueError: If a size is not two ints >= 1, or `method` is unknown.
      TypeError: If `sizes` is not a mapping.

    Example:
      >>> episodes = rlds_reverb.load(path, encoded_frames='all')
      >>> decoded = episodes.apply(frames.decode_frames(
      ...     sizes={'observation/image': (128, 160)}))
      >>> # observation/image: uint8[T, 128, 160, 3], observation/image_present: bool[T]
    """
    sizes = _check_sizes(sizes, argument='sizes')
    method = _check_method(method)
    suffix = types.FRAME_PRESENT_SUFFIX if masks else None

    def _transform(dataset: tf.data.Dataset) -> tf.data.Dataset:
        known = (
            frame_formats if frame_formats is not None else episodes_lib.find_frame_formats(dataset)
        )
        chosen = frames.select_formats(known, fields, argument='decode_frames')
        frames.select_formats(chosen, list(sizes), argument='decode_frames sizes')
        frame_fns = {
            path: (_resizer(size, method), (*size, chosen[path].shape[2]))
            for path, size in sizes.items()
        }
        left = {p: f for p, f in known.items() if p not in chosen}

        def _decode(element: Any, index: tf.Tensor) -> Any:
            del index
            return frames.decode_fields(element, chosen, present_suffix=suffix, frame_fns=frame_fns)

        return _apply(dataset, _decode, formats=left)

    return _transform


def _resizer(size: Size, method: str) -> frames.FrameFn:
    return lambda frame: resize_images(frame, size, method=method)


def resize_frames(sizes: Mapping[str, Size], *, method: str = 'bilinear') -> Transform:
    """Returns a transform resizing decoded frame fields, per camera.

    Args:
      sizes: `{path: (height, width)}`.
      method: `tf.image.resize`'s method.

    Returns:
      A `dataset -> dataset` transform over episodes, trajectories or batches.

    Raises:
      FrameFieldError: When applied, if a path is not a decoded uint8 `[..., H, W, C]`
        field (an encoded one: decode it first).
      ValueError: If a size is not two ints >= 1, or `method` is unknown.

    Example:
      >>> batches.apply(frames.resize_frames({'observation/wrist_image': (64, 64)}))
    """
    sizes = _check_sizes(sizes, argument='sizes')
    method = _check_method(method)
    fns = {path: _resizer(size, method) for path, size in sizes.items()}

    def _transform(dataset: tf.data.Dataset) -> tf.data.Dataset:
        _check_frame_leaves(dataset, list(sizes), transform='resize_frames')
        return _apply(dataset, lambda element, index: _map_fields(element, fns))

    return _transform


def crop_frames(
    sizes: Mapping[str, Size], *, mode: CropMode | str = CropMode.CENTER, seed: int = 0
) -> Transform:
    """Returns a transform cropping decoded frame fields, per camera: center or random.

    Args:
      sizes: `{path: (height, width)}`: the crop of each field, at most its frames' size.
      mode: `CropMode` or its value: 'center' or 'random' (a position per frame).
      seed: Seeds the random positions (with each element's position in the dataset).

    Returns:
      A `dataset -> dataset` transform over episodes, trajectories or batches.

    Raises:
      FrameFieldError: When applied, if a path is not a decoded uint8 frame field.
      ValueError: If a size is not two ints >= 1, or `mode` is unknown.
      tf.errors.InvalidArgumentError: When run, if a crop is larger than the frames.

    Example:
      >>> episodes.apply(frames.crop_frames({'observation/image': (224, 224)}, mode='random'))
    """
    sizes = _check_sizes(sizes, argument='sizes')
    crop_mode: CropMode = types.as_enum(CropMode, mode, argument='mode')
    seed = checks.check_int_at_least(seed, 0, argument='seed')

    def _crop(element: Any, index: tf.Tensor) -> Any:
        fns = {
            path: _cropper(size, crop_mode, _seed_of(seed, index, number))
            for number, (path, size) in enumerate(sorted(sizes.items()))
        }
        return _map_fields(element, fns)

    def _transform(dataset: tf.data.Dataset) -> tf.data.Dataset:
        _check_frame_leaves(dataset, list(sizes), transform='crop_frames')
        return _apply(dataset, _crop)

    return _transform


def _cropper(size: Size, mode: CropMode, seed: tf.Tensor) -> Callable[[tf.Tensor], tf.Tensor]:
    return lambda images: crop_images(images, size, mode=mode, seed=seed)


def augment_frames(
    fields: Sequence[str],
    *,
    brightness: float = 0.0,
    contrast: tuple[float, float] | None = None,
    flip: bool = False,
    seed: int = 0,
) -> Transform:
    """Returns a transform with seeded per-frame brightness, contrast and flips.

    Args:
      fields: The `/` paths of decoded frame fields.
      brightness: Max brightness change on a 0..1 scale, >= 0 (0: none).
      contrast: `(low, high)` contrast factors, 0 <= low <= high (None: none).
      flip: Whether to mirror each frame left-right with probability 1/2.
      seed: Seeds the draws (with each element's position in the dataset).

    Returns:
      A `dataset -> dataset` transform over episodes, trajectories or batches.

    Raises:
      FrameFieldError: When applied, if a path is not a decoded uint8 frame field.
      ValueError: If `brightness` < 0, `contrast` is not 0 <= low <= high, or `seed` < 0.

    Example:
      >>> batches.apply(frames.augment_frames(['observation/image'], brightness=0.1,
      ...                                     contrast=(0.8, 1.2), flip=True, seed=0))
    """
    paths = [p.strip('/') for p in ([fields] if isinstance(fields, str) else fields)]
    brightness = checks.check_number_above(brightness, 0.0, argument='brightness', inclusive=True)
    if contrast is not None and not 0.0 <= contrast[0] <= contrast[1]:
        raise ValueError(f'contrast={contrast!r} is not valid; expected 0 <= low <= high.')
    seed = checks.check_int_at_least(seed, 0, argument='seed')

    def _augment(element: Any, index: tf.Tensor) -> Any:
        fns = {
            path: _augmenter(_seed_of(seed, index, number), brightness, contrast, flip)
            for number, path in enumerate(sorted(paths))
        }
        return _map_fields(element, fns)

    def _transform(dataset: tf.data.Dataset) -> tf.data.Dataset:
        _check_frame_leaves(dataset, paths, transform='augment_frames')
        return _apply(dataset, _augment)

    return _transform


def _augmenter(seed, brightness, contrast, flip) -> Callable[[tf.Tensor], tf.Tensor]:
    return lambda images: augment_images(
        images, seed, brightness=brightness, contrast=contrast, flip=flip
    )
