"""Shared helpers for the benchmark scripts: timing and one-line reports."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')


def measure_steps_per_second(
    make_batches: Callable[[], Iterable], *, steps_per_batch: Callable[[object], int]
) -> tuple[float, int, float]:
    """Consumes every batch once; returns (steps/s, steps, seconds)."""
    start = time.perf_counter()
    steps = 0
    for batch in make_batches():
        steps += steps_per_batch(batch)
    seconds = time.perf_counter() - start
    return steps / seconds, steps, seconds


def print_row(name: str, rate: float, steps: int, seconds: float, *, unit: str = 'steps/s') -> None:
    """Prints one benchmark row."""
    print(f'{name:<48} {rate:>12,.0f} {unit}   ({steps:,} in {seconds:.2f} s)')
