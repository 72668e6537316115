"""Server memory per stored step against the chunks and items the server holds (issue 31).

`benchmarks/frames.py --parts memory` measures a server's growth per stored step; this
says where it goes. Each case pushes a layout of `benchmarks/image_data.py` (encoded frames,
`load(dir, encoded_frames='all')`) with one item kind and one writer engine into a fresh
Reverb server in a process of its own (with a checkpointer), reads the growth of its
resident memory, then checkpoints the table and counts what the checkpoint holds:

* chunks, split into frame columns (over 2,000 bytes a row) and small columns, with their
  lengths in rows (a histogram) and their serialized bytes;
* items, with their serialized record's bytes, columns and chunk slices.

Reverb sizes a writer's chunks itself (its auto-tuned chunker, the only one a
`StructuredWriter` has; the `TrajectoryEngine` sets 32-row chunks for small columns), and
the server keeps every chunk as an object of its own, so the chunk count is the figure to
compare with the memory.

Run: `.venv/bin/python -m benchmarks.server_chunks --data-dir DIR [--layouts ...]
[--steps N] [--cases two-step:auto n-step:auto n-step:structured ...]`, on datasets
written by `benchmarks.frames` (`DIR/<layout>_<steps>/`).
"""

from __future__ import annotations

import argparse
import collections
import os
import pathlib
import pickle
import subprocess
import sys
import tempfile
import time

import reverb
import tensorflow as tf

import rlds_reverb
from benchmarks import image_data
from rlds_reverb import items, tables
from rlds_reverb.core import compat

_ITEMS = {'two-step': items.TwoStep(), 'n-step': items.NStep(3, 0.99)}
_FRAME_ROW_BYTES = 2000  # Rows larger than this are frames (JPEG: ~4.5 to 17 KB).

_SERVER_SCRIPT = """
import pickle, sys
import reverb
path, specs = pickle.load(sys.stdin.buffer)
server = reverb.Server([
    reverb.Table(name=name, sampler=reverb.selectors.Uniform(), remover=reverb.selectors.Fifo(),
                 max_size=size, rate_limiter=reverb.rate_limiters.MinSize(1), signature=signature)
    for name, size, signature in specs],
    checkpointer=reverb.checkpointers.DefaultCheckpointer(path))
print(server.port, flush=True)
sys.stdin.buffer.read()  # Serves until the benchmark closes the pipe.
server.stop()
"""


def _records(path: pathlib.Path):
    return tf.data.TFRecordDataset(str(path), compression_type='ZLIB').as_numpy_iterator()


def count_chunks(checkpoint: pathlib.Path) -> dict:
    """Chunks of a Reverb checkpoint (`ChunkData`): counts, bytes and lengths, by kind."""
    counts: collections.Counter = collections.Counter()
    sizes: collections.Counter = collections.Counter()
    lengths: collections.Counter = collections.Counter()
    _, schema = compat.reverb_checkpoint_protos()
    for record in _records(checkpoint / 'chunks.tfrecord'):
        sequence = schema.ChunkData.FromString(record).sequence_range
        rows = sequence.end - sequence.start + 1
        kind = 'frame' if len(record) / rows > _FRAME_ROW_BYTES else 'small'
        counts[kind] += 1
        sizes[kind] += len(record)
        lengths[kind, rows] += 1
    return {'counts': counts, 'bytes': sizes, 'lengths': lengths}


def count_items(checkpoint: pathlib.Path) -> dict:
    """Items of a Reverb checkpoint (`PrioritizedItem`): count, mean bytes, columns, slices."""
    _, schema = compat.reverb_checkpoint_protos()
    count = size = columns = slices = 0
    for record in _records(checkpoint / 'items.tfrecord'):
        count += 1
        size += len(record)
        trajectory = schema.PrioritizedItem.FromString(record).flat_trajectory
        columns += len(trajectory.columns)
        slices += sum(len(column.chunk_slices) for column in trajectory.columns)
    per = max(count, 1)
    return {'items': count, 'bytes': size / per, 'columns': columns / per, 'slices': slices / per}


def _rss_bytes(pid: int) -> int:
    with open(f'/proc/{pid}/status') as status:
        line = next(x for x in status if x.startswith('VmRSS:'))
    return int(line.split()[1]) * 1024


def measure_case(directory: pathlib.Path, item_name: str, engine: str, steps: int) -> None:
    """Pushes into a fresh server process, then prints its growth and its checkpoint's counts."""
    episodes = rlds_reverb.load(directory, encoded_frames='all')
    item = _ITEMS[item_name]
    specs = [('replay', image_data.MAX_ITEMS, tables.signature_for(item, episodes))]
    with tempfile.TemporaryDirectory() as path:
        process = subprocess.Popen(
            [sys.executable, '-c', _SERVER_SCRIPT],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        process.stdin.write(pickle.dumps((path, specs)))
        process.stdin.flush()
        address = f'localhost:{int(process.stdout.readline())}'
        time.sleep(0.5)  # Lets the server settle before its baseline RSS is read.
        start = _rss_bytes(process.pid)
        started = time.perf_counter()
        rlds_reverb.push(episodes, address, 'replay', item=item, engine=engine)
        seconds = time.perf_counter() - started
        growth = _rss_bytes(process.pid) - start
        reverb.Client(address).checkpoint()
        checkpoint = max(pathlib.Path(path).iterdir())
        chunks, held = count_chunks(checkpoint), count_items(checkpoint)
        process.stdin.close()
        process.wait(timeout=60)
    _show(item_name, engine, steps, seconds, growth, chunks, held)


def _show(item_name, engine, steps, seconds, growth, chunks, held) -> None:
    counts = chunks['counts']
    common = sorted(
        (rows, number) for (kind, rows), number in chunks['lengths'].items() if kind == 'small'
    )
    print(
        f'  {item_name}, engine={engine}: {steps / seconds:,.0f} steps/s; server '
        f'+{growth / steps / 1e3:.1f} KB per stored step (load '
        f'{"/".join(f"{x:.1f}" for x in os.getloadavg())})\n'
        f'    chunks: {counts["frame"]:,} frame ({chunks["bytes"]["frame"] / 1e6:,.1f} MB), '
        f'{counts["small"]:,} small ({chunks["bytes"]["small"] / 1e6:,.1f} MB) = '
        f'{(counts["frame"] + counts["small"]) / steps:.2f} a step\n'
        f'    small chunks by rows: {", ".join(f"{r}: {n:,}" for r, n in common)}\n'
        f'    items: {held["items"]:,}, {held["bytes"]:.0f} bytes each, '
        f'{held["columns"]:.0f} columns, {held["slices"]:.1f} chunk slices',
        flush=True,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--data-dir', type=pathlib.Path, required=True)
    parser.add_argument('--layouts', nargs='+', default=['fractal_like', 'two_cameras'])
    parser.add_argument('--steps', type=int, default=20_000)
    parser.add_argument(
        '--cases', nargs='+', default=['two-step:auto', 'n-step:auto', 'n-step:structured']
    )
    args = parser.parse_args(argv)
    for name in args.layouts:
        layout = image_data.LAYOUTS[name]._replace(steps=args.steps)
        directory = image_data.write_dataset(args.data_dir, f'{name}_{args.steps}', layout)
        print(f'{name}: {args.steps:,} steps', flush=True)
        for case in args.cases:
            item_name, engine = case.split(':')
            measure_case(directory, item_name, engine, args.steps)


if __name__ == '__main__':
    main()
