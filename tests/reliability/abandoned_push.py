"""A push that fails on a blocked server, which is then killed; the writer must not hang.

    python tests/reliability/abandoned_push.py --address A --source DIR --server-pid P --engine E

With `--engine observer`, `ReverbAddTrajectoryObserver` writes half of the first episode's
steps instead (never closed, as after a driver that failed), and is dropped the same way.

Pushes the dataset at `--source` into the `replay` table at `--address`, whose rate limiter
blocks inserts (`server_process.py --blocking`), so the push fails with a `PushError` while
its writer holds items the server never confirmed. Then kills the server, drops every
reference to the failed push and collects garbage: Reverb's writer destructors wait for
pending items without a timeout, so a writer left to them hangs here forever (the test
runs this program with a timeout). Prints `released` and exits 0 when nothing hung.
"""

import argparse
import gc
import os
import signal

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

import reverb  # noqa: E402
import tree  # noqa: E402

from rlds_reverb.core import errors  # noqa: E402
from rlds_reverb.read import loading  # noqa: E402
from rlds_reverb.transform import convert  # noqa: E402
from rlds_reverb.write import observers  # noqa: E402
from rlds_reverb.write import push as writers  # noqa: E402


def _push_until_blocked(address: str, source: str, engine: str) -> str:
    try:
        writers.push(loading.load(source), address, 'replay', engine=engine, timeout_ms=2_000)
    except errors.PushError as e:
        return str(e)
    raise AssertionError('the push into a blocked table did not fail')


def _observe_without_closing(address: str, source: str):
    """Returns a message and the observer, which still holds items the server has not taken."""
    observer = observers.ReverbAddTrajectoryObserver(reverb.Client(address), 'replay', 2)
    episode = next(
        convert.convert_episodes_to_trajectories(loading.load(source)).as_numpy_iterator()
    )
    # Half the episode: at its end the observer would wait (as TF-Agents' does, no timeout)
    # in `end_episode` for the blocked table.
    steps = len(episode.step_type) // 2
    for t in range(steps):
        observer(tree.map_structure(lambda x: x[t], episode))  # noqa: B023 - used at once.
    return f'observed {steps} steps', observer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--address', required=True)
    parser.add_argument('--source', required=True)
    parser.add_argument('--server-pid', type=int, required=True)
    parser.add_argument('--engine', required=True)
    args = parser.parse_args()
    observer = None
    if args.engine == 'observer':
        message, observer = _observe_without_closing(args.address, args.source)
    else:
        message = _push_until_blocked(args.address, args.source, args.engine)
    print(message, flush=True)
    os.kill(args.server_pid, signal.SIGKILL)
    del observer
    gc.collect()
    print('released', flush=True)


if __name__ == '__main__':
    main()
