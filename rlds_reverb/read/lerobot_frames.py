"""LeRobot cameras kept encoded: image-mode PNG bytes handed out as stored; video refused.

An image-mode camera (info.json dtype `image`) stores each frame as PNG bytes in the data
files. `load(path, encoded_frames=...)` hands those bytes out unchanged (a `[T]`
`tf.string` per episode; `lerobot.py` then skips their decode), with the format info.json
gives: `png` and the camera's height, width and channels (`core.frames.FrameFormat`). A
video-mode camera's frames live in an mp4 file, encoded against each other: there are no
per-frame bytes to hand out, so `encoded_frames` naming one, or `'all'` on a dataset that
has one among its selected step fields, is refused with the camera's name and what to do.
"""

from __future__ import annotations

from collections.abc import Sequence

from rlds_reverb.core.errors import FrameFieldError
from rlds_reverb.core.frames import FrameFormat
from rlds_reverb.read import frame_fields, lerobot_meta
from rlds_reverb.read.lerobot_fields import Layout
from rlds_reverb.read.options import ALL_FRAMES, EncodedFrames

# Helpers of the package's other modules only (`load` reads LeRobot datasets): nothing public.
__all__: list[str] = []

# What LeRobot's image mode stores (its writer saves each frame as a PNG file, then embeds it).
_CODEC = 'png'


def list_image_formats(layout: Layout) -> dict[str, FrameFormat]:
    """Returns the image-mode cameras among the layout's step fields, and their formats."""
    return {
        field.key: FrameFormat(_CODEC, field.frame_shape)
        for field in layout.fields
        if field.feature.dtype == lerobot_meta.IMAGE and field.frame_shape is not None
    }


def choose_encoded(
    layout: Layout, encoded_frames: EncodedFrames, *, where: str
) -> dict[str, FrameFormat]:
    """Returns the formats of the cameras `encoded_frames` keeps encoded.

    Args:
      layout: The dataset's layout (its selected step fields).
      encoded_frames: `LoadOptions.encoded_frames`: None, 'all' or `/` paths.
      where: The dataset, as messages name it.

    Raises:
      FrameFieldError: If it names a video camera (or is 'all' and a video camera is among
        the step fields), or a path that is no image-mode camera; lists those there are.

    Example:
      >>> choose_encoded(layout, 'all', where='the LeRobot dataset at /data/so100')
      {'observation/images/front': FrameFormat(codec='png', shape=(480, 640, 3))}
    """
    if encoded_frames is None:
        return {}
    videos = {f.key: f.feature.name for f in layout.fields if f.feature.dtype == lerobot_meta.VIDEO}
    named = videos if encoded_frames == ALL_FRAMES else _pick(videos, encoded_frames)
    if named:
        _refuse_videos(named, encoded_frames, where=where)
    return frame_fields.choose_encoded(encoded_frames, list_image_formats(layout), where=where)


def _pick(videos: dict[str, str], paths: Sequence[str]) -> dict[str, str]:
    keys = {path.strip('/') for path in paths}
    return {key: name for key, name in videos.items() if key in keys}


def _refuse_videos(named: dict[str, str], encoded_frames: EncodedFrames, *, where: str) -> None:
    cameras = ', '.join(f'{key} ({name!r})' for key, name in sorted(named.items()))
    raise FrameFieldError(
        f'{where}: encoded_frames={encoded_frames!r} asks for the video camera(s) {cameras} '
        'as encoded frames, but a video camera stores its frames in an mp4 file, encoded '
        'against each other: there are no per-frame bytes to keep. Read them decoded '
        '(leave the camera out of encoded_frames, or choose the other fields with '
        'step_fields), or convert the dataset with image mode (rlds-reverb convert SRC OUT '
        '--to lerobot, without --video: PNG frames), whose frames stay encoded.'
    )
