"""Time to the first batch, stage by stage, each measurement in a fresh process.

For the 200,000 HalfCheetah-like steps `benchmarks/disk.py` writes with TFDS' writer, one
fresh Python process per round (so no round reuses another's traced functions or caches):
imports and an untimed warm-up (TensorFlow's first dataset, as `disk.py` does), then the
drop-in path a user writes, `convert_rlds_to_trajectories(load(dir)).batch(256)`, timed
stage by stage (`load`, convert and `.batch`, `iter()`, first batch; wall and process CPU
seconds) with every function `tf.data` traced on the way and its op count; then
`push` of one episode into a fresh uniform table (first episode written) and a
`LearnerDataset`'s first batch on that table. `--rounds` processes; medians at the end.

Run: `.venv/bin/python -m benchmarks.first_batch [--rounds 5] [--data-dir DIR]`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

_BATCH = 256
_TABLE = 'replay'
_STAGES = (
    'load()',
    'convert(...).batch(256)',
    'iter()',
    'first batch',
    'to the first batch',
    'CPU s to the first batch',
    'push: signature + server',
    'push: first episode written',
    'LearnerDataset + as_dataset()',
    'LearnerDataset: first batch',
)


def _measure(directory: str) -> dict:
    """One round, in this (fresh) process: stage seconds and the traced functions."""
    import reverb
    import tensorflow as tf
    from tensorflow.python.data.ops import structured_function
    from tf_agents.replay_buffers import rlds_to_reverb  # noqa: F401  (as disk.py imports)

    import rlds_reverb
    from rlds_reverb.core import episodes as episodes_lib
    from rlds_reverb.learn import sampling
    from rlds_reverb.serve import tables

    for _ in episodes_lib.to_episode_tensors(rlds_reverb.load(directory)).take(1):
        pass  # TensorFlow's one-time start, untimed.
    traced = []
    original = structured_function.StructuredFunctionWrapper.__init__

    def _init(self, func, transformation_name, *args, **kwargs):
        started = time.perf_counter()
        original(self, func, transformation_name, *args, **kwargs)
        graph = self.function.graph
        library = sum(len(f.node_def) for f in graph.as_graph_def().library.function)
        name = getattr(func, '__qualname__', type(func).__name__)
        ops = len(graph.get_operations())
        traced.append((transformation_name, name, ops, library, time.perf_counter() - started))

    structured_function.StructuredFunctionWrapper.__init__ = _init
    marks = [time.perf_counter()]
    cpu_started = time.process_time()
    episodes = rlds_reverb.load(directory)
    marks.append(time.perf_counter())
    batches = rlds_reverb.convert_rlds_to_trajectories(episodes).batch(_BATCH)
    marks.append(time.perf_counter())
    iterator = iter(batches)
    marks.append(time.perf_counter())
    next(iterator)
    marks.append(time.perf_counter())
    cpu = time.process_time() - cpu_started
    structured_function.StructuredFunctionWrapper.__init__ = original
    seconds = [after - before for before, after in zip(marks, marks[1:], strict=False)]
    seconds += [marks[-1] - marks[0], cpu]
    started = time.perf_counter()
    signature = tables.signature_for(rlds_reverb.items.TwoStep(), episodes)
    server = reverb.Server([tables.uniform(_TABLE, max_size=10**6, signature=signature)])
    seconds.append(time.perf_counter() - started)
    try:
        address = f'localhost:{server.port}'
        first = []
        started = time.perf_counter()
        rlds_reverb.push(
            episodes.take(1), address, _TABLE, progress=lambda *_: first.append(time.perf_counter())
        )
        seconds.append(first[0] - started)
        started = time.perf_counter()
        data_spec = tf.nest.map_structure(lambda s: tf.TensorSpec(s.shape[1:], s.dtype), signature)
        learner = sampling.LearnerDataset(
            address, _TABLE, data_spec=data_spec, batch_size=_BATCH, sequence_length=2
        )
        dataset = learner.as_dataset()
        seconds.append(time.perf_counter() - started)
        started = time.perf_counter()
        next(iter(dataset))
        seconds.append(time.perf_counter() - started)
    finally:
        server.stop()
    return {'seconds': seconds, 'traced': traced}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--rounds', type=int, default=5, help='fresh processes')
    parser.add_argument('--data-dir', default=None, help="disk.py's data directory")
    parser.add_argument('--probe', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe:
        print(json.dumps(_measure(args.probe)))
        return 0
    from benchmarks import disk  # Imported here: the probes import only what they time.

    data_dir = disk.pathlib.Path(args.data_dir) if args.data_dir else disk._make_default_data_dir()  # noqa: SLF001
    directory = os.fspath(disk.write_dataset(data_dir, 'halfcheetah_like'))
    rounds = []
    for index in range(args.rounds):
        out = subprocess.run(
            [sys.executable, '-m', 'benchmarks.first_batch', '--probe', directory],
            capture_output=True,
            text=True,
            check=True,
        )
        rounds.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(
            f'round {index + 1}: '
            + ', '.join(f'{s:.3f}' for s in rounds[-1]['seconds'])
            + f'   load average {os.getloadavg()[0]:.1f}',
            flush=True,
        )
    print('medians (seconds):')
    for position, stage in enumerate(_STAGES):
        print(f'  {stage:<32} {statistics.median(r["seconds"][position] for r in rounds):.3f}')
    print('functions traced by load, convert and .batch (round 1): ops, in branches, seconds')
    for transformation, name, ops, library, seconds in rounds[0]['traced']:
        print(f'  {transformation:<22} {name:<58} {ops:>4} {library:>4} {seconds:.3f}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
