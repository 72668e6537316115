"""Stopping a learner held back by a rate limiter (issue 34: it took 35 s; now within 5 s).

A `SampleToInsertRatio` table that two writer threads feed slowly: the learner takes what
the limiter allows at once, then waits about 16 s for each batch of 64. Releasing its
iterator, `LearnerDataset.stop()`, and Ctrl-C on a learner process must all end the wait
within `_STOP_S` of being asked.
"""

from __future__ import annotations

import gc
import os
import pathlib
import queue
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import reverb
import tensorflow as tf

from rlds_reverb.core import compat
from rlds_reverb.learn import sampling, stopping
from rlds_reverb.serve import tables

SPEC = {'observation': tf.TensorSpec([3], tf.float32)}
_TABLE = 'limited'
_BATCH = 64
_STOP_S = 5.0
_INSERT_INTERVAL_S = 0.5  # Per writer: 4 samples/s allowed in all, 16 s per batch.
_HELPER = pathlib.Path(__file__).with_name('blocked_learner.py')


def _insert(client: reverb.Client, count: int) -> None:
    with client.trajectory_writer(num_keep_alive_refs=1) as writer:
        for i in range(count):
            writer.append({'observation': np.full([3], i, np.float32)})
            writer.create_item(_TABLE, 1.0, {'observation': writer.history['observation'][-1]})
        writer.flush()


def _write_slowly(address: str, stop: threading.Event) -> None:
    """Inserts one item every `_INSERT_INTERVAL_S` until `stop`; never blocks for long."""
    writer = reverb.Client(address).trajectory_writer(num_keep_alive_refs=1)
    pending, i = False, 0
    while not stop.wait(0 if pending else _INSERT_INTERVAL_S):
        if not pending:
            writer.append({'observation': np.full([3], i, np.float32)})
            writer.create_item(_TABLE, 1.0, {'observation': writer.history['observation'][-1]})
            i += 1
        try:
            writer.flush(timeout_ms=int(_INSERT_INTERVAL_S * 1000))
            pending = False
        except (reverb.errors.DeadlineExceededError, RuntimeError):
            pending = True  # The limiter holds inserts back once no learner samples.
    if pending:  # Reverb's writer would wait for it when destroyed: keep it instead.
        compat.keep_alive_forever(writer)


@pytest.fixture
def address():
    """A server whose limiter holds samples back, fed by two slow writer threads."""
    table = tables.uniform(
        _TABLE,
        max_size=10_000,
        signature=SPEC,
        samples_per_insert=1.0,
        min_size_to_sample=1,
        error_buffer=float(_BATCH),
    )
    server = reverb.Server([table])
    address = f'localhost:{server.port}'
    _insert(reverb.Client(address), _BATCH)  # One batch at once, then about 16 s each.
    stop = threading.Event()
    writers = [
        threading.Thread(target=_write_slowly, args=(address, stop), daemon=True) for _ in range(2)
    ]
    for writer in writers:
        writer.start()
    try:
        yield address
    finally:
        stop.set()
        for writer in writers:
            writer.join(timeout=10)
        server.stop()


def _learner(address: str) -> sampling.LearnerDataset:
    return sampling.LearnerDataset(
        address, _TABLE, data_spec=SPEC, sequence_length=None, batch_size=_BATCH
    )


def _wait_until_held_back(iterator) -> None:
    """Takes the batches the limiter allows at once; returns once the next one waits."""
    next(iterator)
    time.sleep(3)


def test_releasing_an_iterator_held_back_by_the_limiter_is_quick(address):
    iterator = iter(_learner(address).as_dataset())
    _wait_until_held_back(iterator)
    asked = time.monotonic()
    del iterator
    gc.collect()
    assert time.monotonic() - asked < _STOP_S


@pytest.mark.slow  # About 35 s: its last check waits for the limiter's next batch (16 s).
def test_stop_ends_an_iterator_blocked_in_next_by_the_limiter(address):
    learner = _learner(address)
    iterator = iter(learner.as_dataset())
    _wait_until_held_back(iterator)
    ended: queue.Queue[float] = queue.Queue()

    def train() -> None:
        for _ in iterator:
            pass
        ended.put(time.monotonic())

    thread = threading.Thread(target=train, daemon=True)
    thread.start()
    time.sleep(2)  # Blocked in next(): the limiter allows a batch about every 16 s.
    assert thread.is_alive()
    asked = time.monotonic()
    learner.stop()
    assert ended.get(timeout=60) - asked < _STOP_S
    thread.join()
    # Iterators made after the stop sample as usual.
    assert next(iter(learner.as_dataset().take(1))).weights.shape == (_BATCH,)


def test_ctrl_c_advances_the_stop_and_still_reaches_a_wakeup_fd_set_before():
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    previous = signal.set_wakeup_fd(write_fd)  # As an event loop's.
    try:
        stop = stopping.StopSignal()
        assert stopping.watch_interrupts(stop)
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
        deadline = time.monotonic() + 10
        while int(stop.count.numpy()) == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert int(stop.count.numpy()) == 1
        assert os.read(read_fd, 16) == bytes([signal.SIGINT])
    finally:
        signal.set_wakeup_fd(previous)
        os.close(read_fd)
        os.close(write_fd)


def _read_lines(stream, lines: queue.Queue) -> None:
    for line in stream:
        lines.put(line.strip())


@pytest.mark.slow
@pytest.mark.parametrize('mode', ['dataset', 'function'])
def test_ctrl_c_ends_a_learner_process_held_back_by_the_limiter(address, mode, subprocess_env):
    process = subprocess.Popen(
        [sys.executable, str(_HELPER), address, _TABLE, mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=subprocess_env,
    )
    try:
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=_read_lines, args=(process.stdout, lines), daemon=True).start()
        assert lines.get(timeout=120) == 'ready'
        assert lines.get(timeout=60) == 'batch'
        while True:  # The batches the limiter allows at once, then a wait of about 16 s.
            try:
                lines.get(timeout=3)
            except queue.Empty:
                break
        asked = time.monotonic()
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)
        waited = time.monotonic() - asked
        stderr = process.stderr.read()
    finally:
        process.kill()
        process.wait()
    assert process.returncode == -signal.SIGINT, stderr
    assert 'KeyboardInterrupt' in stderr
    assert waited < _STOP_S, f'exited {waited:.1f} s after SIGINT'
