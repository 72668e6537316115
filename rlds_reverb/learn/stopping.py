"""Stopping a learner promptly, also while a rate limiter holds its samples back.

A learner's iterator that waits for samples a rate limiter holds back (a `SampleToInsertRatio`
table whose writers insert slowly) keeps the calling thread inside TensorFlow's `GetNext`,
where Python cannot raise `KeyboardInterrupt`: Ctrl-C, and releasing the iterator, waited
until the limiter let a whole batch through (35 s in issue 34). Two parts end such a wait:

* **Slices.** Each sample stream of a `LearnerDataset` that may drop a sample without
  losing data (a table with `max_times_sampled` 0, read without a
  `rate_limiter_timeout_ms`) waits on its rate limiter in slices of
  `timeouts.LEARNER_STOP_CHECK_MS`: a Reverb iterator whose worker got no sample for a
  slice ends, and the stream opens the next one (`StopSignal.make_attempts`) unless its
  learner was asked to stop since the stream started. A table that gives each item a
  bounded number of times (`max_times_sampled`, a queue) is read in one wait: Reverb drops
  the samples an ending iterator holds, which would lose those items.
* **The ask.** `LearnerDataset.stop()` advances the learner's `StopSignal`; so does Ctrl-C
  (SIGINT, and SIGTERM when the program handles it) with
  `SamplingOptions.stop_on_interrupt`. The main thread is the one blocked, so the signal
  is seen through Python's wakeup file descriptor (`signal.set_wakeup_fd`), read by a
  daemon thread (`watch_interrupts`); a wakeup descriptor set before (an asyncio loop's)
  still gets every byte. Once the streams end, `GetNext` returns, Python raises the
  `KeyboardInterrupt`, and the program unwinds and exits as usual.
* **The handler.** An ended iterator returns through TensorFlow's conversion of a failed
  op's status into an exception, and Python runs the pending signal's handler right there,
  where the `KeyboardInterrupt` it raises would turn into pybind11's `RuntimeError`. So
  the program's own handler of SIGINT (and of SIGTERM, if it has one) is wrapped
  (`_DeferredHandler`): called inside that conversion, it delivers the signal again a
  moment later (`_thread.interrupt_main`), outside it; anywhere else it calls the
  program's handler at once.

A stop ends the iterators waiting at that moment, and any other iterator of a dataset made
before it once that one waits a whole slice; datasets made afterwards (`as_dataset()`)
sample as usual.
"""

from __future__ import annotations

import _thread
import os
import signal
import sys
import threading
import types
import weakref
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from rlds_reverb.core import compat
from rlds_reverb.core.episodes import without_autograph

# Helpers of the package's other modules only: nothing here is public API.
__all__: list[str] = []

# The signals that stop learners: Ctrl-C, and a polite termination the program handles.
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_STOP_SIGNAL_NUMBERS = frozenset(int(number) for number in _STOP_SIGNALS)
# How long a signal that arrived inside TensorFlow's error conversion is put off.
_REDELIVERY_DELAY_S = 0.05


class StopSignal:
    """A learner's stop counter: each stop ends the datasets made before it.

    Example:
      >>> stop = StopSignal()
      >>> samples = stop.make_attempts().flat_map(lambda _: make_one_slice())
    """

    def __init__(self) -> None:
        self.count = tf.Variable(0, dtype=tf.int64, trainable=False, name='learner_stops')

    def advance(self) -> None:
        """Asks every dataset made before now to end at the end of its iterators' slices.

        Example:
          >>> stop.advance()
        """
        self.count.assign_add(1)

    def make_attempts(self) -> tf.data.Dataset:
        """Returns an endless dataset of int64 scalars that ends once the counter advances.

        The counter is compared, before each element, with its value now: each element
        starts one more slice of a stream, and none starts after a stop (one traced
        function per stream).

        Example:
          >>> stop.make_attempts().flat_map(lambda _: one_slice)
        """
        count = self.count
        start = count.read_value()  # Now: the dataset is made when this is called.
        return tf.data.Dataset.range(sys.maxsize).take_while(
            without_autograph(lambda _: tf.equal(count.read_value(), start))
        )


class _InterruptWatcher:
    """Reads Python's wakeup file descriptor in a daemon thread; stops learners on SIGINT."""

    def __init__(self) -> None:
        self._read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.write_fd, False)
        self._forward: tuple[int, tuple[int, int]] | None = None  # (fd, its device, inode)
        self.signals: weakref.WeakSet[StopSignal] = weakref.WeakSet()
        threading.Thread(target=self._run, name='rlds_reverb-learner-stop', daemon=True).start()

    def forget(self) -> None:
        """Gives a forked child its wakeup descriptor back: its signals are not ours to read."""
        if threading.current_thread() is threading.main_thread():
            signal.set_wakeup_fd(-1 if self._forward is None else self._forward[0])
        os.close(self._read_fd)
        os.close(self.write_fd)

    def install(self) -> None:
        """Makes the wakeup descriptor ours, forwarding to the last one, and wraps the
        program's handlers of the stop signals (from the main thread)."""
        previous = signal.set_wakeup_fd(self.write_fd, warn_on_full_buffer=False)
        if previous != self.write_fd:
            self._forward = None if previous == -1 else (previous, _identify(previous))
        for number in _STOP_SIGNALS:
            handler = signal.getsignal(number)
            if callable(handler) and not isinstance(handler, _DeferredHandler):
                signal.signal(number, _DeferredHandler(handler))

    def _run(self) -> None:
        while True:
            try:
                data = os.read(self._read_fd, 512)
            except OSError:
                return
            if not data:
                return
            self._forward_bytes(data)
            if _STOP_SIGNAL_NUMBERS.intersection(data):
                for stop in list(self.signals):
                    stop.advance()

    def _forward_bytes(self, data: bytes) -> None:
        """Writes `data` to the wakeup descriptor set before ours, while it is still that one."""
        forward = self._forward
        if forward is None:
            return
        try:
            if _identify(forward[0]) == forward[1]:
                os.write(forward[0], data)
                return
        except OSError:
            pass
        self._forward = None  # Closed by its owner (its number may be another file's now).


def _identify(fd: int) -> tuple[int, int]:
    """Returns the device and inode of an open file descriptor."""
    stat = os.fstat(fd)
    return stat.st_dev, stat.st_ino


class _DeferredHandler:
    """The program's handler of a signal, called outside TensorFlow's error conversion.

    Called inside it, the handler returns at once and leaves a profile function that
    calls the program's handler at the first call, return or C call made outside the
    conversion: where the exception being raised reaches Python, before anything else runs.

    Example:
      >>> signal.signal(signal.SIGINT, _DeferredHandler(signal.getsignal(signal.SIGINT)))
    """

    def __init__(self, handler: Callable[[int, types.FrameType | None], Any]):
        self.handler = handler

    def __call__(self, number: int, frame: types.FrameType | None) -> Any:
        if not compat.is_converting_tf_status(frame):
            return self.handler(number, frame)
        if sys.getprofile() is not None:  # A profiler runs: deliver a moment later instead.
            timer = threading.Timer(_REDELIVERY_DELAY_S, _thread.interrupt_main, args=(number,))
            timer.daemon = True
            timer.start()
            return None

        def deliver(frame: types.FrameType, event: str, arg: Any) -> None:
            if not compat.is_converting_tf_status(frame):
                sys.setprofile(None)
                self.handler(number, frame)  # A KeyboardInterrupt propagates from here.

        sys.setprofile(deliver)
        return None


_watcher: _InterruptWatcher | None = None
_watcher_lock = threading.Lock()


def _forget_watcher_in_child() -> None:
    global _watcher, _watcher_lock
    _watcher_lock = threading.Lock()  # Another thread of the parent may have held it.
    if _watcher is not None:
        _watcher.forget()
        _watcher = None


def watch_interrupts(stop: StopSignal) -> bool:
    """Makes SIGINT (and a handled SIGTERM) advance `stop`, from now on.

    Installs the process's one watcher on first use, and makes its descriptor Python's
    wakeup descriptor again (an event loop may have replaced it since). Only the main
    thread may do that: from another thread, `stop` is watched once a learner of the main
    thread installed the watcher.

    Returns:
      Whether an interrupt now reaches `stop`.

    Example:
      >>> watch_interrupts(learner_stop_signal)
    """
    global _watcher
    with _watcher_lock:
        if threading.current_thread() is threading.main_thread() and sys.platform != 'win32':
            if _watcher is None:
                _watcher = _InterruptWatcher()
                os.register_at_fork(after_in_child=_forget_watcher_in_child)
            _watcher.install()
        if _watcher is None:
            return False
        _watcher.signals.add(stop)
        return True
