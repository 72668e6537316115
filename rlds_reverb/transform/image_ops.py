"""Image ops on `[..., H, W, C]` uint8 tensors: resize, crop, augment, vectorized.

The per-camera transforms of `rlds_reverb.transform.frames` apply these to the frame
fields of episodes, trajectories and sampled batches; they are usable in any `tf.data` map
too. Every op takes images with any leading dimensions (`[T, ...]`, `[B, T, ...]`), works on
them as one `[N, H, W, C]` batch, and returns uint8. Random ops are stateless: the same
`[2]` seed gives the same images.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

import tensorflow as tf

__all__ = [
    'CropMode',
    'Size',
    'augment_images',
    'crop_images',
    'resize_images',
]

# A frame size: (height, width).
Size = tuple[int, int]


class CropMode(enum.Enum):
    """Where a crop is taken.

    CENTER: the middle of the frame (evaluation).
    RANDOM: a uniformly drawn position per frame (training), seeded.
    """

    CENTER = 'center'
    RANDOM = 'random'


def _to_batch(images: tf.Tensor) -> tuple[tf.Tensor, Callable[[tf.Tensor], tf.Tensor]]:
    """Returns `[N, H, W, C]` images and the function restoring the leading dims."""
    lead = tf.shape(images)[:-3]
    flat = tf.reshape(images, tf.concat([[-1], tf.shape(images)[-3:]], 0))

    def _restore(batch: tf.Tensor) -> tf.Tensor:
        out = tf.reshape(batch, tf.concat([lead, tf.shape(batch)[1:]], 0))
        out.set_shape(images.shape[:-3].concatenate(batch.shape[1:]))
        return out

    return flat, _restore


def resize_images(images: tf.Tensor, size: Size, *, method: str = 'bilinear') -> tf.Tensor:
    """Returns `[..., H, W, C]` uint8 images resized to `size`, rounded back to uint8.

    Antialiased when shrinking (`tf.image.resize(..., antialias=True)`).

    Example:
      >>> resize_images(frames, (128, 160))  # [T, 256, 320, 3] -> [T, 128, 160, 3]
    """
    if images.shape.rank in (3, 4):  # One image, or a batch: tf.image.resize takes both.
        resized = tf.image.resize(images, size, method=method, antialias=True)
        return tf.cast(tf.clip_by_value(tf.round(resized), 0, 255), tf.uint8)
    batch, restore = _to_batch(images)
    return restore(resize_images(batch, size, method=method))


def crop_images(
    images: tf.Tensor,
    size: Size,
    *,
    mode: CropMode = CropMode.CENTER,
    seed: tf.Tensor | None = None,
) -> tf.Tensor:
    """Returns `[..., h, w, C]` crops of `[..., H, W, C]` images (one position per image).

    Args:
      images: The images (any uint8 or other dtype).
      size: The crop's (height, width), at most the images'.
      mode: CENTER, or RANDOM (a position per image drawn with `seed`).
      seed: A `[2]` int seed of stateless random ops (RANDOM).

    Example:
      >>> crop_images(frames, (224, 224), mode=CropMode.RANDOM, seed=tf.constant([0, 1]))
    """
    height, width = size
    shape = tf.shape(images)
    room_y, room_x = shape[-3] - height, shape[-2] - width
    # Stateful: run with every element of a tf.data map, and at once when eager.
    tf.debugging.assert_non_negative(
        tf.minimum(room_y, room_x), message=f'crop size {size} is larger than the frames'
    )
    if mode is CropMode.CENTER:
        return images[..., room_y // 2 : room_y // 2 + height, room_x // 2 : room_x // 2 + width, :]
    batch, restore = _to_batch(images)
    count = tf.shape(batch)[0]
    draws = tf.random.stateless_uniform([count, 2], seed=seed)
    top = tf.cast(draws[:, 0] * tf.cast(room_y + 1, tf.float32), tf.int32)
    left = tf.cast(draws[:, 1] * tf.cast(room_x + 1, tf.float32), tf.int32)
    rows = tf.minimum(top, room_y)[:, None] + tf.range(height)[None, :]
    cols = tf.minimum(left, room_x)[:, None] + tf.range(width)[None, :]
    cropped = tf.gather(tf.gather(batch, rows, axis=1, batch_dims=1), cols, axis=2, batch_dims=1)
    return restore(cropped)


def augment_images(
    images: tf.Tensor,
    seed: tf.Tensor,
    *,
    brightness: float = 0.0,
    contrast: tuple[float, float] | None = None,
    flip: bool = False,
) -> tf.Tensor:
    """Returns `[..., H, W, C]` uint8 images with per-image random brightness, contrast and
    horizontal flips (stateless, from `seed`).

    Args:
      images: uint8 images.
      seed: A `[2]` int seed.
      brightness: Each image gets `delta` ~ U[-brightness, brightness] added (on a 0..1
        scale); 0 for none.
      contrast: `(low, high)`: each image's contrast scaled by a factor ~ U[low, high]
        around its per-channel mean; None for none.
      flip: Whether each image is mirrored left-right with probability 1/2.

    Example:
      >>> augment_images(frames, tf.constant([0, 7]), brightness=0.1, flip=True)
    """
    batch, restore = _to_batch(images)
    count = tf.shape(batch)[0]
    draws = tf.random.stateless_uniform([count, 3], seed=seed)
    out = tf.image.convert_image_dtype(batch, tf.float32)
    if contrast is not None:
        low, high = contrast
        factor = (low + (high - low) * draws[:, 1])[:, None, None, None]
        mean = tf.reduce_mean(out, axis=[1, 2], keepdims=True)
        out = (out - mean) * factor + mean
    if brightness:
        out += (2.0 * draws[:, 0] - 1.0)[:, None, None, None] * brightness
    if flip:
        out = tf.where((draws[:, 2] < 0.5)[:, None, None, None], tf.reverse(out, axis=[2]), out)
    return restore(
        tf.image.convert_image_dtype(tf.clip_by_value(out, 0.0, 1.0), tf.uint8, saturate=True)
    )
