"""A push that pauses after some episodes, so that a test can kill its server mid-push.

    python tests/reliability/paused_push.py --address A --source DIR --engine E --pause-after K

Pushes the dataset at `--source` into the `replay` table at `--address` with
`rlds_reverb.push` (its default timeouts: 60 s per wait). After K whole episodes it prints
`written K` and waits for a line on stdin (the test kills the server meanwhile), then
pushes on. A push whose server died must fail within seconds with a `PushError` that says
what landed, and the program must exit: the error propagates as in any user's script
(exit code 1, the message on stderr).
"""

import argparse
import os
import sys

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

from rlds_reverb.read import loading  # noqa: E402
from rlds_reverb.write import push as writers  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--address', required=True)
    parser.add_argument('--source', required=True)
    parser.add_argument('--engine', required=True)
    parser.add_argument('--pause-after', type=int, required=True)
    args = parser.parse_args()
    written = 0

    def _pause(episodes: int, steps: int) -> None:
        nonlocal written
        written += episodes
        if written == args.pause_after:
            print(f'written {written}', flush=True)
            sys.stdin.readline()

    writers.push(
        loading.load(args.source), args.address, 'replay', engine=args.engine, progress=_pause
    )
    print('pushed everything', flush=True)


if __name__ == '__main__':
    main()
