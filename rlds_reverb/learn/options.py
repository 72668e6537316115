"""`SamplingOptions`: every option of a learner dataset, defined once with its default and check.

`LearnerDataset(address, tables, data_spec=..., options=SamplingOptions(...))` takes one
value; its keyword form, `LearnerDataset(address, tables, data_spec=..., batch_size=256,
beta=0.4)`, names the same fields, which override those of `options` (`merge_overrides`),
so an option means the same, is checked the same and fails with the same message either
way. The value is frozen: `dataclasses.replace(options, ...)` makes a changed copy, and a
caller's value is never changed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import tensorflow as tf

from rlds_reverb.core import checks, frames, timeouts, types
from rlds_reverb.learn import plan, priorities
from rlds_reverb.learn.staleness import StalenessFilter
from rlds_reverb.transform import frames as frame_transforms
from rlds_reverb.transform.image_ops import CropMode, Size

__all__ = [
    'DEFAULT_SERVER_INFO_TIMEOUT_MS',
    'ExperienceFn',
    'SamplingOptions',
    'merge_overrides',
]

# Maps a batch of items (leaves `[B, ...]`) to the experience the agent trains on.
ExperienceFn = Callable[[types.Nest], types.Nest]

# How long the server-info call made when a learner is built may take, per server.
DEFAULT_SERVER_INFO_TIMEOUT_MS = timeouts.LEARNER_SERVER_INFO_MS
_REVERB_AUTO = -1  # Reverb's own choice of workers per iterator.


@dataclasses.dataclass(frozen=True, kw_only=True)
class SamplingOptions:
    """How a `LearnerDataset` samples: one value for every option of a learner.

    Attributes:
      batch_size: Items per batch (required).
      sequence_length: Steps per item (2 for two-step trajectories), or None for items
        without a time axis (n-step transitions).
      beta: The importance-sampling exponent β: a float in [0, 1], a `tf.Variable` or a
        zero-argument schedule (see `priorities.linear_beta_schedule`); None gives weights 1.
      experience_fn: Maps a batch of items to the agent's experience (identity if None).
      staleness: Drops stale samples (see `StalenessFilter`).
      server_ratios: With several servers, the share of each table's items per batch taken
        from each server (one ratio per server, normalized); None: in proportion to the
        table's size on each server when the learner is built.
      iterators_per_stream: Reverb iterators reading each (server, table) stream in
        parallel, each giving a fixed part of the stream's count per batch (None:
        `DEFAULT_ITERATORS_PER_STREAM`; FIFO tables always use 1).
      num_workers_per_iterator: Reverb sampling workers per iterator (None:
        `DEFAULT_WORKERS_PER_ITERATOR`, -1: Reverb's own choice; FIFO tables always use 1).
      max_in_flight_samples_per_worker: Samples requested per round trip (None:
        `IN_FLIGHT_BATCHES_PER_WORKER` times the largest per-iterator count, at least
        `MIN_IN_FLIGHT_SAMPLES_PER_WORKER`).
      prefetch_batches: Batches prepared ahead (`tf.data.AUTOTUNE` by default; 0: none).
      rate_limiter_timeout_ms: How long a table may block sampling before the iterator
        fails with "table is empty"; -1 waits forever (in slices of
        `timeouts.LEARNER_STOP_CHECK_MS`, so that a stop is noticed within one).
      server_info_timeout_ms: Timeout of the server-info call made when the learner is
        built (per server).
      stop_on_interrupt: Whether Ctrl-C (SIGINT, and SIGTERM when the program handles it)
        stops the learner's iterators (`LearnerDataset.stop`), so that the interrupt
        reaches the program within about a second even while a rate limiter holds
        samples back (`rlds_reverb.learn.stopping`).
      decode_frames: For tables holding encoded frames (pushed from `load(...,
        encoded_frames=...)`; their signatures name the fields): `'all'` (default: every
        such field decoded after sampling, uint8 `[H, W, C]` per step, as a push of
        decoded frames delivers them), or the `/` paths of those to decode; None or `()`
        delivers the bytes (`rlds_reverb.learn.decoding`).
      frame_sizes: `{path: (height, width)}`: decoded frames resized, per camera.
      frame_crops: `{path: (height, width)}`: decoded (and resized) frames cropped.
      frame_crop_mode: `CropMode` or its value: 'center' (default) or 'random'.
      frame_seed: Seeds random crops (with each batch's position), >= 0.
      frame_masks: Whether each decoded field gets a bool `<field>_present` beside it
        (false where the step stored no frame: an empty string, decoded as zeros).

    Raises:
      ValueError: Naming the first invalid option and what is expected.

    Example:
      >>> options = SamplingOptions(batch_size=256, beta=0.4)
      >>> learner = LearnerDataset(address, 'replay', data_spec=spec, options=options)
    """

    batch_size: int
    sequence_length: int | None = 2
    beta: priorities.Beta | None = None
    experience_fn: ExperienceFn | None = None
    staleness: StalenessFilter | None = None
    server_ratios: Sequence[float] | None = None
    iterators_per_stream: int | None = None
    num_workers_per_iterator: int | None = None
    max_in_flight_samples_per_worker: int | None = None
    prefetch_batches: int = tf.data.AUTOTUNE
    rate_limiter_timeout_ms: int = -1
    server_info_timeout_ms: int = DEFAULT_SERVER_INFO_TIMEOUT_MS
    stop_on_interrupt: bool = True
    decode_frames: frames.FrameSelection | None = frames.ALL
    frame_sizes: Mapping[str, Size] | None = None
    frame_crops: Mapping[str, Size] | None = None
    frame_crop_mode: CropMode | str = CropMode.CENTER
    frame_seed: int = 0
    frame_masks: bool = False

    def __post_init__(self) -> None:
        priorities.check_beta(self.beta)
        if self.sequence_length is not None:
            checks.check_int_at_least(self.sequence_length, 1, argument='sequence_length')
        checks.check_int_at_least(
            self.rate_limiter_timeout_ms, -1, argument='rate_limiter_timeout_ms'
        )
        checks.check_int_at_least(self.batch_size, 1, argument='batch_size')
        if self.server_ratios is not None:  # Their count is checked against the servers.
            ratios = tuple(self.server_ratios)
            plan.compute_server_counts(1, sizes=[0] * len(ratios), ratios=ratios)
            object.__setattr__(self, 'server_ratios', ratios)
        for name in ('iterators_per_stream', 'max_in_flight_samples_per_worker'):
            if getattr(self, name) is not None:
                checks.check_int_at_least(getattr(self, name), 1, argument=name)
        workers = self.num_workers_per_iterator
        if workers is not None and workers != _REVERB_AUTO:
            checks.check_int_at_least(workers, 1, argument='num_workers_per_iterator')
        checks.check_int_at_least(self.prefetch_batches, -1, argument='prefetch_batches')
        checks.check_int_at_least(self.server_info_timeout_ms, 1, argument='server_info_timeout_ms')
        if self.experience_fn is not None and not callable(self.experience_fn):
            raise ValueError(
                f'experience_fn={self.experience_fn!r} is not valid; expected a function of '
                'a batch of items.'
            )
        if self.staleness is not None and not isinstance(self.staleness, StalenessFilter):
            raise ValueError(
                f'staleness={self.staleness!r} is not valid; expected a StalenessFilter.'
            )
        checks.check_bool(self.stop_on_interrupt, argument='stop_on_interrupt')
        self._check_frame_options()

    def _check_frame_options(self) -> None:
        """Checks the frame options by building the transforms they configure."""
        selection = self.decode_frames
        if selection is not None and selection != frames.ALL:
            if isinstance(selection, str) or not all(isinstance(p, str) for p in selection):
                raise ValueError(
                    f"decode_frames={selection!r} is not valid; expected 'all', None or a "
                    "sequence of frame field paths such as ['observation/image']."
                )
            object.__setattr__(self, 'decode_frames', tuple(p.strip('/') for p in selection))
        mode = types.as_enum(CropMode, self.frame_crop_mode, argument='frame_crop_mode')
        object.__setattr__(self, 'frame_crop_mode', mode)
        checks.check_int_at_least(self.frame_seed, 0, argument='frame_seed')
        builds: dict[str, Callable[[Any], Any]] = {
            'frame_sizes': frame_transforms.resize_frames,
            'frame_crops': frame_transforms.crop_frames,
        }
        for name, build in builds.items():
            try:  # The transforms check their sizes when built.
                build(getattr(self, name) or {})
            except (TypeError, ValueError) as e:
                raise type(e)(f'{name}: {e}') from e
        for name in ('frame_sizes', 'frame_crops'):
            given = getattr(self, name)
            object.__setattr__(
                self, name, {p.strip('/'): tuple(size) for p, size in (given or {}).items()}
            )
        checks.check_bool(self.frame_masks, argument='frame_masks')


_Options = TypeVar('_Options')


def merge_overrides(
    options_type: type[_Options],
    options: _Options | None,
    overrides: Mapping[str, Any],
    *,
    entry_point: str,
) -> _Options:
    """Returns the options of an entry point that takes `options=` and keyword overrides.

    The keywords are fields of `options_type`: without `options` they make a new value,
    with it they replace its fields in a copy (`dataclasses.replace`); `options` itself is
    never changed. The options classes of learners and exports share this one rule.

    Args:
      options_type: The frozen options dataclass.
      options: The caller's options value, or None.
      overrides: The keyword options given to the entry point.
      entry_point: The entry point's name, for messages.

    Returns:
      The options value to use.

    Raises:
      TypeError: If a keyword is not a field of `options_type` (as Python names an
        unexpected keyword argument).
      ValueError: If `options` is not an `options_type`, or an option is invalid.

    Example:
      >>> merge_overrides(SamplingOptions, None, {'batch_size': 32}, entry_point='x')
    """
    names = [field.name for field in dataclasses.fields(options_type)]  # type: ignore[arg-type]
    unknown = sorted(set(overrides) - set(names))
    if unknown:
        raise TypeError(
            f'{entry_point}() got unexpected keyword argument(s) {", ".join(unknown)}; its '
            f'options are the fields of {options_type.__name__}: {", ".join(names)}.'
        )
    if options is None:
        return options_type(**overrides)
    if not isinstance(options, options_type):
        raise ValueError(
            f'options={options!r} is not valid; expected {options_type.__name__}(...).'
        )
    return dataclasses.replace(options, **overrides) if overrides else options  # type: ignore[type-var]
