"""`rlds-reverb convert` (`save_as_rlds`): any source to an RLDS TFDS dataset, with its anchor.

Sources, each a TFDS directory written by TFDS' own writer (`benchmarks.disk.write_dataset`,
reused from the cache between runs) or by the toolkit (CartPole):

* the embedded CartPole data (`rlds_reverb.examples.cartpole`, 250 episodes);
* 200,000 HalfCheetah-like steps (observation float32[17], action float32[6], 200
  episodes of 1,000);
* 20,000 image steps (uint8[64, 64, 3] PNG, 200 episodes of 100).

Ours: `save_as_rlds(src, out)`, set-up included (opening the source, tracing, writing,
moving into place). The anchor, what a user writes with TFDS alone: `builder.as_dataset()`
read as NumPy episodes and written with `tfds.dataset_builders.store_as_tfds_dataset`
(TFDS' own writer, its Python serializer). Peak memory: `save_as_rlds` of a quarter of the
HalfCheetah-like data and of all of it, each in a fresh process (ru_maxrss).

Run: `.venv/bin/python -m benchmarks.save_rlds [--rounds 3] [--no-anchor]`.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import tensorflow_datasets as tfds

from benchmarks import disk
from benchmarks.common import print_row
from rlds_reverb.core import episodes as episodes_lib
from rlds_reverb.core import types
from rlds_reverb.examples import cartpole
from rlds_reverb.export import rlds_copy

_IMAGE_LAYOUT = disk.Layout(100, 20_000, (64, 64, 3), (1,), image=True)


def _count_steps(directory: pathlib.Path) -> int:
    info = tfds.builder_from_directory(os.fspath(directory)).info
    return int(info.splits['train'].num_examples)


def _time_ours(source: pathlib.Path, out: pathlib.Path) -> tuple[float, int]:
    shutil.rmtree(out, ignore_errors=True)
    stats = rlds_copy.save_as_rlds(source, out)
    return stats.seconds, stats.steps


def _time_anchor(source: pathlib.Path, out_dir: pathlib.Path) -> tuple[float, int]:
    """TFDS alone: `as_dataset` as NumPy episodes into `store_as_tfds_dataset`."""
    shutil.rmtree(out_dir, ignore_errors=True)
    started = time.perf_counter()
    builder = tfds.builder_from_directory(os.fspath(source))
    episodes = builder.as_dataset(split='train').map(
        lambda e: {**e, types.STEPS: episodes_lib.batch_steps(e[types.STEPS])}
    )
    steps = 0

    def _examples():
        nonlocal steps
        for index, episode in enumerate(episodes.as_numpy_iterator()):
            steps += len(episode[types.STEPS][types.IS_FIRST])
            yield f'episode_{index}', episode

    tfds.dataset_builders.store_as_tfds_dataset(
        name='anchor_copy',
        version='1.0.0',
        features=builder.info.features,
        split_datasets={'train': _examples()},
        data_dir=os.fspath(out_dir),
        disable_shuffling=True,
    )
    return time.perf_counter() - started, steps


def _bench(name: str, source: pathlib.Path, scratch: pathlib.Path, *, rounds: int, anchor: bool):
    timings = [_time_ours(source, scratch / f'{name}_ours') for _ in range(rounds)]
    steps = timings[0][1]
    seconds = [s for s, _ in timings]
    rates = ', '.join(f'{steps / s:,.0f}' for s in seconds)
    print_row(f'{name}: save_as_rlds (median of {rounds})', steps / statistics.median(seconds),
              steps, statistics.median(seconds))  # fmt: skip
    print(f'    rounds: {rates} steps/s')
    if anchor:
        seconds, anchor_steps = _time_anchor(source, scratch / f'{name}_anchor')
        print_row(f'{name}: TFDS as_dataset -> store_as_tfds_dataset', anchor_steps / seconds,
                  anchor_steps, seconds)  # fmt: skip


def _probe_rss(source: str, episodes: int) -> None:
    out = tempfile.mkdtemp()
    try:
        rlds_copy.save_as_rlds(source, os.path.join(out, 'copy'), split=f'train[:{episodes}]')
    finally:
        shutil.rmtree(out, ignore_errors=True)
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)


def _measure_rss(source: pathlib.Path) -> None:
    for episodes in (50, 200):
        out = subprocess.run(
            [sys.executable, '-m', 'benchmarks.save_rlds', '--probe-rss', str(source),
             str(episodes)],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        mib = out.stdout.strip().splitlines()[-1]
        print(f'peak RSS, save_as_rlds of {episodes * 1000:,} steps: {mib} MiB')


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--no-anchor', action='store_true')
    parser.add_argument('--no-rss', action='store_true')
    parser.add_argument('--data-dir', default=None, help='where the source datasets are cached')
    parser.add_argument(
        '--only', default=None, help="one source: 'cartpole', 'halfcheetah_like'..."
    )
    parser.add_argument('--probe-rss', nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe_rss:
        _probe_rss(args.probe_rss[0], int(args.probe_rss[1]))
        return 0
    tfds.disable_progress_bar()
    data_dir = pathlib.Path(args.data_dir) if args.data_dir else disk._make_default_data_dir()  # noqa: SLF001
    cartpole_dir = data_dir / cartpole.NAME / cartpole.VERSION
    if not (cartpole_dir / 'dataset_info.json').is_file():
        cartpole.generate(data_dir)
    sources = {
        'cartpole (embedded)': cartpole_dir,
        'halfcheetah_like 200k': disk.write_dataset(data_dir, 'halfcheetah_like'),
        'image_like 20k': disk.write_dataset(data_dir, 'image_like_20k', layout=_IMAGE_LAYOUT),
    }
    with tempfile.TemporaryDirectory() as scratch:
        for name, source in sources.items():
            if args.only and not name.startswith(args.only):
                continue
            _bench(name.split()[0], source, pathlib.Path(scratch), rounds=args.rounds,
                   anchor=not args.no_anchor)  # fmt: skip
    if not args.no_rss:
        _measure_rss(sources['halfcheetah_like 200k'])
    return 0


if __name__ == '__main__':
    sys.exit(main())
