"""A LeRobot dataset's video frames: decoded with PyAV, at LeRobot's own timestamps.

In video mode a camera's frames are AV1 (or H.264, HEVC) streams in
`videos/<camera>/chunk-*/file-*.mp4`, many episodes one after the other in each file.
LeRobot 0.6.1 returns frame i of episode e as the decoded frame nearest to
`from_timestamp[e] + timestamp[i]` (float64 plus the float32 column) and refuses one more
than `TOLERANCE_S` away (`DatasetReader._query_videos`). `VideoCursor` does the same while
decoding each file forward once: it keeps its decoder open between episodes, skips frames
before the next query, and seeks (to the keyframe at or before it) only when the query lies
behind it or far ahead, so memory holds one episode's frames, never a whole file.

YUV to RGB: as LeRobot's default decoder (torchcodec) converts, which honours a stream's
colour matrix and, on its filter path (widths that are not a multiple of 32), its range; on
the untagged BT.601 streams LeRobot writes this is also exactly what its PyAV backend gives
(`frame.to_ndarray('rgb24')`), so both of LeRobot's backends agree bit for bit with it there
(checked on the fixtures, tests/read/test_lerobot.py). Videos tagged BT.709 or full range by
other tools are where LeRobot's two backends differ; this follows torchcodec.
"""

from __future__ import annotations

import math
import pathlib
from typing import Any

import numpy as np

from rlds_reverb.core.errors import LeRobotFormatError

# Helpers of the package's other modules only (`load` reads LeRobot datasets): nothing public.
__all__: list[str] = []

# LeRobot's `tolerance_s` default: how far a decoded frame may be from the time asked for.
TOLERANCE_S = 1e-4
# Decoding forward beats seeking for gaps up to this (LeRobot's keyframes are 2 frames apart).
_SEEK_AHEAD_S = 2.0
# AVColorSpace -> the swscale coefficient set of that matrix (as sws_getCoefficients maps it).
_MATRICES = {1: 'ITU709', 4: 'FCC', 5: 'ITU601', 6: 'ITU601', 7: 'SMPTE240M'}
_JPEG_RANGE = 2  # AVCOL_RANGE_JPEG: full range.


def to_rgb(frame: Any) -> np.ndarray:
    """Returns a decoded video frame as uint8 RGB `[H, W, 3]`, as torchcodec converts it.

    PyAV applies a source matrix and range only when source and destination differ, so the
    destination is set to another matrix (it does not affect RGB output).
    """
    matrix = _MATRICES.get(int(frame.colorspace), 'ITU601')
    full = int(frame.color_range) == _JPEG_RANGE and frame.width % 32 != 0
    other = 'ITU709' if matrix == 'ITU601' else 'ITU601'
    return frame.to_ndarray(
        format='rgb24',
        src_colorspace=matrix,
        dst_colorspace=other,
        src_color_range='JPEG' if full else 'MPEG',
        dst_color_range='JPEG',
    )


class VideoCursor:
    """Hands out one camera's frames at the times asked for, decoding its files forward.

    Args:
      camera: The camera's feature name (for messages).
      frame_shape: The frames' (height, width, channels), as info.json says.
    """

    def __init__(self, camera: str, frame_shape: tuple[int, int, int]):
        self._camera = camera
        self._shape = frame_shape
        self._path: pathlib.Path | None = None
        self._container: Any = None
        self._stream: Any = None
        self._frames: Any = None
        self._pending: Any = None  # The next decoded frame not yet passed: (time, frame).
        self._last_time = -math.inf

    def close(self) -> None:
        """Closes the open file, if any."""
        if self._container is not None:
            self._container.close()
        self._container = self._stream = self._frames = self._pending = self._path = None

    def _open(self, path: pathlib.Path, *, episode: int) -> None:
        import av  # Only video mode needs PyAV (and its FFmpeg).

        self.close()
        if not path.is_file():
            raise LeRobotFormatError(
                f'{path} is missing: camera {self._camera!r} of episode {episode} is in it '
                '(videos/<camera>/chunk_index and file_index of the episodes table).'
            )
        try:
            self._container = av.open(str(path))
            self._stream = self._container.streams.video[0]
        except (av.error.FFmpegError, IndexError) as e:
            raise LeRobotFormatError(f'{path} is not a readable video ({e}).') from e
        self._stream.thread_type = 'AUTO'
        self._path = path
        self._restart()

    def _restart(self) -> None:
        self._frames = self._container.decode(self._stream)
        self._pending = None
        self._last_time = -math.inf

    def _seek(self, time_s: float) -> None:
        """Positions the decoder at the keyframe at or before `time_s`."""
        target = math.floor((time_s - TOLERANCE_S) / self._stream.time_base) - 1
        self._container.seek(max(target, 0), backward=True, any_frame=False, stream=self._stream)
        self._restart()

    def _next(self, query: float, *, episode: int) -> tuple[float, Any]:
        """Returns the pending frame, decoding the next one when none is pending."""
        import av

        while self._pending is None:
            try:
                frame = next(self._frames)
            except StopIteration:
                raise LeRobotFormatError(
                    f'{self._path} ends at {self._last_time:.6f} s, before the frame of '
                    f'episode {episode} at {query:.6f} s (from_timestamp + timestamp) of camera '
                    f'{self._camera!r}: the video is too short for the timestamps.'
                ) from None
            except av.error.FFmpegError as e:
                raise LeRobotFormatError(
                    f'{self._path}: decoding failed near {query:.6f} s (episode {episode}, '
                    f'camera {self._camera!r}): {e}.'
                ) from e
            if frame.pts is not None:
                self._last_time = float(frame.pts * self._stream.time_base)
                self._pending = (self._last_time, frame)
        return self._pending

    def read(self, path: pathlib.Path, times_s: np.ndarray, *, episode: int) -> np.ndarray:
        """Returns the frames of `path` at `times_s` (ascending), uint8 `[n, H, W, C]`.

        Raises:
          LeRobotFormatError: If the file is missing or unreadable, ends too soon, has no
            frame within `TOLERANCE_S` of a time, or its frames are not the shape info.json
            gives.
        """
        if path != self._path:
            self._open(path, episode=episode)
        out = np.empty((len(times_s), *self._shape), np.uint8)
        if not len(times_s):
            return out
        first = float(times_s[0])
        position = self._pending[0] if self._pending is not None else self._last_time
        if first < position - TOLERANCE_S or first - position > _SEEK_AHEAD_S:
            self._seek(first)
        for i, query in enumerate(times_s.tolist()):
            time, frame = self._next(query, episode=episode)
            while time < query - TOLERANCE_S:
                self._pending = None
                time, frame = self._next(query, episode=episode)
            if abs(time - query) >= TOLERANCE_S:
                raise LeRobotFormatError(
                    f'{path}: no frame of camera {self._camera!r} within {TOLERANCE_S} s of '
                    f'{query:.6f} s (episode {episode}, frame {i}: from_timestamp + timestamp); '
                    f'the nearest after it is at {time:.6f} s. The episodes table or the '
                    'timestamp column disagrees with the video.'
                )
            out[i] = self._convert(frame, path)
        return out

    def _convert(self, frame: Any, path: pathlib.Path) -> np.ndarray:
        rgb = to_rgb(frame)
        if rgb.shape != self._shape:
            raise LeRobotFormatError(
                f'{path}: frames of camera {self._camera!r} are {list(rgb.shape)}; info.json '
                f'says {list(self._shape)} (height, width, channels).'
            )
        return rgb
