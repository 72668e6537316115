"""A Reverb server in its own process, for fault tests (killed with SIGKILL by the test).

    python tests/reliability/server_process.py --port P --source DIR --checkpoint-dir D [--blocking]

Serves one table, `replay`: FIFO sampling, each item sampled at most once (so a test can
drain every item exactly once), a `MinSize(1)` rate limiter (with `--blocking`, one that
blocks inserts after a few items until samples come, and none do), and the two-step
signature of the dataset at `--source`. With `--checkpoint-dir` it restores the latest checkpoint there
(through `rlds_reverb.serve.server.start_server`, which resets its rate limiters first). Prints
`ready` once serving.
"""

import argparse
import os
import signal

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

import reverb  # noqa: E402

from rlds_reverb.read import loading
from rlds_reverb.serve import tables
from rlds_reverb.serve.server import start_server  # noqa: E402
from rlds_reverb.transform import items  # noqa: E402

TABLE = 'replay'


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--port', type=int, required=True)
    parser.add_argument('--source', required=True)
    parser.add_argument('--checkpoint-dir', default=None)
    parser.add_argument('--blocking', action='store_true')
    args = parser.parse_args()
    limiter = (
        reverb.rate_limiters.SampleToInsertRatio(1.0, min_size_to_sample=1, error_buffer=4.0)
        if args.blocking
        else reverb.rate_limiters.MinSize(1)
    )
    signature = tables.signature_for(items.TwoStep(), loading.load(args.source))
    table = reverb.Table(
        TABLE,
        sampler=reverb.selectors.Fifo(),
        remover=reverb.selectors.Fifo(),
        max_size=10**7,
        rate_limiter=limiter,
        max_times_sampled=1,
        signature=signature,
    )
    server = start_server([table], port=args.port, checkpoint_dir=args.checkpoint_dir)
    print('ready', flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    server.stop()


if __name__ == '__main__':
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    main()
