"""Load: several writer processes and sampler threads on one loopback server.

Bounded: writing ends `RLDS_REVERB_SOAK_SECONDS` after the writers are started (default
10, so that the test with its process start-up stays under 60 s; set it higher for the
long variant). Afterwards no thread or process is stuck, the table's counts
add up (items inserted = current size + items removed, from the server's own checkpointed
rate-limiter counters), and every sampled item decoded to its signature and joined two
adjacent steps of one episode.
"""

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import reverb
import tensorflow as tf

from rlds_reverb.serve import checkpoints, tables
from rlds_reverb.transform import items
from tests import builders
from tests.reliability import soak_writer

_SECONDS = float(os.environ.get('RLDS_REVERB_SOAK_SECONDS', '10'))
_WRITERS = 3
_SAMPLERS = 3
_TABLE = soak_writer.TABLE
_HELPER = os.path.join(os.path.dirname(__file__), 'soak_writer.py')


def _make_table() -> reverb.Table:
    episodes = builders.rlds([soak_writer.make_episode(0, 0)])
    signature = tables.signature_for(items.TwoStep(), episodes)
    return reverb.Table(
        _TABLE,
        sampler=reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(),
        # Smaller than one batch per writer (3 x 270 items): evictions always happen.
        max_size=500,
        rate_limiter=reverb.rate_limiters.MinSize(1),
        max_times_sampled=5,  # Sampling removes items too.
        signature=signature,
    )


class _Sampler(threading.Thread):
    """Samples until stopped; checks every item against the signature and the data."""

    def __init__(self, address: str, signature, stop: threading.Event):
        super().__init__(daemon=True)
        self.address, self.signature, self.stop = address, signature, stop
        self.count = 0
        self.errors: list[str] = []

    def _check(self, sample) -> None:
        data = sample.data
        for spec, value in zip(tf.nest.flatten(self.signature), tf.nest.flatten(data), strict=True):
            if spec.dtype != value.dtype or not spec.shape.is_compatible_with(value.shape):
                self.errors.append(f'{value.dtype}{value.shape} does not match {spec}')
        observation = data.observation.numpy()  # [2, 3]: (writer, episode, step) per step.
        if not np.array_equal(observation[1] - observation[0], [0, 0, 1]):
            self.errors.append(f'item steps are not adjacent: {observation.tolist()}')

    def run(self) -> None:
        while not self.stop.is_set():
            dataset = reverb.TrajectoryDataset.from_table_signature(
                self.address,
                _TABLE,
                max_in_flight_samples_per_worker=4,
                rate_limiter_timeout_ms=500,
            )
            try:
                for sample in dataset.take(200):
                    self._check(sample)
                    self.count += 1
                    if self.stop.is_set():
                        break
            except tf.errors.OpError as e:
                self.errors.append(f'{type(e).__name__}: {e.message[:200]}')
                return


def _start_writers(address: str, env: dict[str, str]) -> list[subprocess.Popen]:
    until = time.time() + _SECONDS
    return [
        subprocess.Popen(
            [sys.executable, _HELPER, '--server', address, '--writer', str(w)]
            + ['--until', str(until)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for w in range(_WRITERS)
    ]


def _finish_writers(processes: list[subprocess.Popen]) -> int:
    """Waits for every writer (bounded); returns the items they report."""
    written = 0
    try:
        for process in processes:
            out, err = process.communicate(timeout=_SECONDS + 120)
            assert process.returncode == 0, err[-2000:]
            written += int(out.split()[1])
    finally:
        for process in processes:
            process.kill()
            process.wait(timeout=30)
    return written


@pytest.mark.slow
def test_writers_and_samplers_share_a_server_without_deadlock_or_loss(tmp_path, subprocess_env):
    server = reverb.Server(
        [_make_table()], checkpointer=reverb.checkpointers.DefaultCheckpointer(str(tmp_path))
    )
    stop = threading.Event()
    samplers = []
    started = time.monotonic()
    try:
        address = f'localhost:{server.port}'
        client = reverb.Client(address)
        signature = client.server_info()[_TABLE].signature
        writers = _start_writers(address, subprocess_env)
        samplers = [_Sampler(address, signature, stop) for _ in range(_SAMPLERS)]
        for sampler in samplers:
            sampler.start()
        written = _finish_writers(writers)
        stop.set()
        for sampler in samplers:
            sampler.join(timeout=30)
        assert not any(s.is_alive() for s in samplers), 'a sampler is stuck'
        info = client.server_info()[_TABLE]
        (counters,) = checkpoints.read_table_checkpoints(client.checkpoint())
    finally:
        stop.set()
        server.stop()
    limiter = counters.rate_limiter
    assert written > info.max_size  # Evictions happened.
    assert limiter.insert_count == written == info.rate_limiter_info.insert_stats.completed
    assert limiter.insert_count == info.current_size + limiter.delete_count
    sampled = sum(s.count for s in samplers)
    assert sampled > 0
    assert [e for s in samplers for e in s.errors] == []
    assert time.monotonic() - started < _SECONDS + 180
    print(
        f'soak: {_SECONDS:.0f} s, {written} items written, {sampled} sampled, '
        f'{limiter.delete_count} removed, {info.current_size} left'
    )
