"""Part of a dataset: `.skip(a).take(n)` and `.shard(k, i)` on `load`'s dataset vs a split slice.

The same number of episodes is converted (`convert_rlds_to_trajectories(..., batch_size=256)`)
and validated (`rlds_reverb.validate`), each timing from `rlds_reverb.load` to the end:

* `slice`: `load(dir, split='train[a:a+n]')`;
* `skip_take`: `load(dir).skip(a).take(n)`;
* `shard`: `load(dir).shard(k, i)` with `n` = a k-th of the split;
* `nested`: `load(dir, whole_episodes=False).skip(a).take(n)`, TFDS' per-step datasets.

Rounds alternate the order; medians are printed, with each side's ratio to `slice` (above
1: slower). The datasets are `benchmarks.disk`'s (written once into `--data-dir`).

Run: `.venv/bin/python -m benchmarks.selection [--data-dir DIR] [--layouts ...] [--rounds N]`.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time
from collections.abc import Callable

import tensorflow as tf
import tensorflow_datasets as tfds

import rlds_reverb
from benchmarks import disk

_BATCH = 256


def _count_convert(episodes: tf.data.Dataset) -> int:
    batches = rlds_reverb.convert_rlds_to_trajectories(episodes, batch_size=_BATCH)
    return sum(int(b.step_type.shape[0]) for b in batches)


def _count_validate(episodes: tf.data.Dataset) -> int:
    return rlds_reverb.validate(episodes).steps


def _time(run: Callable[[], int]) -> tuple[float, int]:
    started = time.perf_counter()
    count = run()
    return time.perf_counter() - started, count


def run_layout(directory: pathlib.Path, name: str, *, rounds: int) -> None:
    """Times each way of reading part of the split, for convert and validate."""
    total = tfds.builder_from_directory(str(directory)).info.splits['train'].num_examples
    shards = 4
    count = total // shards
    first = total // 3
    ways = {
        'slice': lambda: rlds_reverb.load(directory, split=f'train[{first}:{first + count}]'),
        'skip_take': lambda: rlds_reverb.load(directory).skip(first).take(count),
        'shard': lambda: rlds_reverb.load(directory).shard(shards, 1),
        'nested': lambda: rlds_reverb.load(directory, whole_episodes=False).skip(first).take(count),
    }
    print(f'{name}: {total} episodes, {count} of them read each way ({directory})')
    for what, consume in (('convert', _count_convert), ('validate', _count_validate)):
        seconds: dict[str, list[float]] = {way: [] for way in ways}
        counts: dict[str, set[int]] = {way: set() for way in ways}
        names = list(ways)
        for index in range(rounds):
            for way in names if index % 2 == 0 else names[::-1]:
                taken, produced = _time(lambda way=way, consume=consume: consume(ways[way]()))
                seconds[way].append(taken)
                counts[way].add(produced)
        anchor = statistics.median(seconds['slice'])
        for way in names:
            median = statistics.median(seconds[way])
            print(
                f'  {what:<8} {way:<10} median {median:6.2f} s  '
                f'({", ".join(f"{s:.2f}" for s in seconds[way])})  '
                f'x{median / anchor:.2f} of slice  steps {sorted(counts[way])}'
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--data-dir', type=pathlib.Path, default=None)
    parser.add_argument(
        '--layouts', nargs='+', default=['cartpole_like', 'halfcheetah_like'], help='datasets'
    )
    parser.add_argument('--rounds', type=int, default=3, help='alternated rounds')
    args = parser.parse_args(argv)
    data_dir = args.data_dir or disk._make_default_data_dir()
    for name in args.layouts:
        run_layout(disk.write_dataset(data_dir, name), name, rounds=args.rounds)
    return 0


if __name__ == '__main__':
    tf.get_logger().setLevel('ERROR')
    sys.exit(main())
