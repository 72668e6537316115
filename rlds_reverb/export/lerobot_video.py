"""One camera's frames as LeRobot video: AV1 in mp4, as LeRobot 0.6.1 encodes, with its PSNR.

LeRobot's video mode encodes each camera with SVT-AV1 (`libsvtav1`, yuv420p, keyframe every
2 frames, crf 30, preset 12, `fast-decode=0`) and keeps many episodes one after the other
in one mp4 (`videos/<camera>/chunk-*/file-*.mp4`). `VideoWriter` encodes the frames of the
episodes of one file in one pass (frame k at k / fps), the colour tags left unspecified as
LeRobot leaves them (every decoder then uses BT.601, limited range), and decodes each packet
as it comes out of the encoder with the reader's own conversion
(`rlds_reverb.read.lerobot_video.to_rgb`): what LeRobot (and `load`) will read back is
compared with the source frames there, without reading the file again, so the recorded
PSNR is of the frames a reader gets. AV1 at these settings is lossy; image mode is the
lossless one.

SVT-AV1 (PyAV 15.1.0's) kills the process (SIGFPE) on frames narrower than 25 pixels, and
encodes odd sizes differently from one run to the next; `check_frame_shape` refuses both
before anything is encoded.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import pathlib
from fractions import Fraction
from typing import Any

import numpy as np

from rlds_reverb.core.errors import LeRobotExportError
from rlds_reverb.read import lerobot_video

# Helpers of the package's other modules only: nothing here is public API.
__all__: list[str] = []

CODEC = 'libsvtav1'
PIXEL_FORMAT = 'yuv420p'
GOP, CRF, PRESET, FAST_DECODE = 2, 30, 12, 0
# LeRobot's reader's tolerance between a frame's time and the time it asks for.
TOLERANCE_S = lerobot_video.TOLERANCE_S
MIN_WIDTH, MIN_HEIGHT = 32, 8
_DECODER = 'libdav1d'


def check_frame_shape(shape: tuple[int, ...], *, camera: str) -> None:
    """Raises unless SVT-AV1 encodes frames of `shape` (H, W, 3) safely and repeatably.

    Raises:
      LeRobotExportError: If the frames are smaller than 32 x 8 (width x height), or a
        side is odd.
    """
    height, width = shape[0], shape[1]
    if width < MIN_WIDTH or height < MIN_HEIGHT or width % 2 or height % 2:
        raise LeRobotExportError(
            f'Camera {camera!r} has frames of {height}x{width} (height x width); video mode '
            f'encodes even sizes of at least {MIN_WIDTH} wide and {MIN_HEIGHT} high only '
            '(SVT-AV1 crashes the process on narrower frames, and encodes odd sizes '
            'differently from run to run). Write this dataset in image mode (no --video), '
            'or resize the frames first.'
        )


def describe_video(shape: tuple[int, ...], fps: int) -> dict:
    """Returns the `info` of a video feature in info.json, as LeRobot writes it."""
    return {
        'video.height': int(shape[0]),
        'video.width': int(shape[1]),
        'video.codec': 'av1',
        'video.pix_fmt': PIXEL_FORMAT,
        'video.fps': int(fps),
        'video.channels': int(shape[2]),
        'has_audio': False,
        'video.g': GOP,
        'video.crf': CRF,
        'video.preset': PRESET,
        'video.fast_decode': FAST_DECODE,
        'video.video_backend': 'pyav',
        'video.extra_options': {},
        'is_depth_map': False,
    }


@dataclasses.dataclass
class Quality:
    """How far the decoded frames are from the source: squared error summed, frames, and
    the worst frame's PSNR (dB)."""

    squared_error: float = 0.0
    values: int = 0
    frames: int = 0
    worst_psnr_db: float = math.inf

    def add(self, other: Quality) -> None:
        """Adds another file's figures to these."""
        self.squared_error += other.squared_error
        self.values += other.values
        self.frames += other.frames
        self.worst_psnr_db = min(self.worst_psnr_db, other.worst_psnr_db)

    @property
    def psnr_db(self) -> float:
        """The PSNR over every frame (inf when every frame decodes exactly)."""
        return compute_psnr(self.squared_error, self.values)

    def as_dict(self) -> dict:
        """The figures, JSON-ready (None for an infinite PSNR)."""
        return {
            'psnr_db': _finite(self.psnr_db),
            'worst_frame_psnr_db': _finite(self.worst_psnr_db),
            'frames': self.frames,
            'squared_error': self.squared_error,
            'values': self.values,
        }

    @classmethod
    def from_dict(cls, data: dict) -> Quality:
        """The figures `as_dict` gave."""
        worst = data['worst_frame_psnr_db']
        return cls(
            data['squared_error'],
            data['values'],
            data['frames'],
            math.inf if worst is None else worst,
        )


def _finite(value: float) -> float | None:
    return None if math.isinf(value) else round(value, 3)


def compute_psnr(squared_error: float, values: int) -> float:
    """PSNR in dB of 8-bit values, from their summed squared error."""
    if values == 0 or squared_error == 0:
        return math.inf
    return 10.0 * math.log10(255.0**2 * values / squared_error)


class VideoWriter:
    """Encodes one camera's frames into one mp4, measuring what a reader gets back.

    Args:
      path: The mp4 to write (replaced).
      fps: Frames per second.
      shape: The frames' (height, width, 3).
      camera: The camera's feature name, for messages.
    """

    def __init__(self, path: pathlib.Path, *, fps: int, shape: tuple[int, ...], camera: str):
        import av  # Only video mode needs PyAV.

        # SVT-AV1 prints its settings on every encoder it opens; errors only, unless asked.
        os.environ.setdefault('SVT_LOG', '1')

        check_frame_shape(shape, camera=camera)
        self._camera = camera
        self._time_base = Fraction(1, fps)
        self._container = av.open(str(path), 'w')
        options = {
            'g': str(GOP),
            'crf': str(CRF),
            'preset': str(PRESET),
            'svtav1-params': f'fast-decode={FAST_DECODE}',
        }
        self._stream: Any = self._container.add_stream(CODEC, fps, options=options)
        self._stream.pix_fmt = PIXEL_FORMAT
        self._stream.height, self._stream.width = int(shape[0]), int(shape[1])
        self._stream.time_base = self._time_base
        self._decoder: Any = av.CodecContext.create(_DECODER, 'r')
        self._waiting: dict[int, np.ndarray] = {}  # Source frames not yet decoded back.
        self._next_pts = 0
        self.quality = Quality()

    def add(self, frames: np.ndarray) -> None:
        """Encodes frames (uint8 `[T, H, W, 3]`) after the ones added before."""
        import av

        for image in frames:
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format='rgb24')
            frame.pts = self._next_pts
            frame.time_base = self._time_base
            self._waiting[self._next_pts] = image
            self._next_pts += 1
            self._mux(self._stream.encode(frame))

    def _mux(self, packets: Any) -> None:
        for packet in packets:
            self._compare(self._decoder.decode(packet))
            self._container.mux(packet)

    def _compare(self, decoded: Any) -> None:
        for frame in decoded:
            source = self._waiting.pop(frame.pts)
            error = float(np.sum((lerobot_video.to_rgb(frame).astype(np.int64) - source) ** 2))
            self.quality.squared_error += error
            self.quality.values += source.size
            self.quality.frames += 1
            psnr = compute_psnr(error, source.size)
            self.quality.worst_psnr_db = min(self.quality.worst_psnr_db, psnr)

    def close(self) -> Quality:
        """Flushes the encoder, closes the file; returns the frames' quality.

        Raises:
          LeRobotExportError: If a frame did not come back out of the decoder.
        """
        self._mux(self._stream.encode())
        self._compare(self._decoder.decode(None))
        self._container.close()
        if self._waiting:
            raise LeRobotExportError(
                f'Camera {self._camera!r}: {len(self._waiting)} frame(s) did not decode back '
                f'from the encoder (first at frame {min(self._waiting)} of its file).'
            )
        return self.quality

    def abort(self) -> None:
        """Closes the file without flushing (after an error)."""
        # Closing after another error: that one is raised, not this one.
        with contextlib.suppress(Exception):
            self._container.close()
