"""A real job on an installed rlds-reverb, run by `tests/test_packaging.py` in a fresh venv.

Run as a program by that venv's Python (never imported by the suite): it writes the embedded
CartPole dataset (a few episodes), validates it, converts it to TF-Agents trajectories, pushes
it into an in-process Reverb server, samples items back and, when the `beam` extra is
installed, pushes it once more on Beam. It prints one JSON line of what it found; any failure
is a traceback and a non-zero exit.

Usage: python packaging_smoke.py WORKDIR
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import reverb  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_agents  # noqa: E402

import rlds_reverb  # noqa: E402
from rlds_reverb import items, tables  # noqa: E402
from rlds_reverb.examples import cartpole  # noqa: E402

_NUM_EPISODES = 4
_NUM_SAMPLES = 8


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise SystemExit(f'packaging smoke check failed: {message}')


def run(workdir: str) -> dict:
    """Runs the job in `workdir` and returns what it found."""
    path = cartpole.generate(workdir, num_episodes=_NUM_EPISODES, seed=0, episodes_per_shard=2)
    episodes = rlds_reverb.load(path)
    report = rlds_reverb.validate(episodes, on_invalid='report')
    _check(report.ok and report.episodes == _NUM_EPISODES, f'validation: {report.format()}')

    batch = next(iter(rlds_reverb.convert_rlds_to_trajectories(episodes).batch(4)))
    _check(
        isinstance(batch, tf_agents.trajectories.Trajectory),
        f'convert gave {type(batch).__name__}, not a TF-Agents Trajectory',
    )

    signature = tables.signature_for(items.TwoStep(), episodes)
    table_names = ['replay', 'beam']
    server = reverb.Server(
        [tables.uniform(name, max_size=10**5, signature=signature) for name in table_names],
        port=None,
    )
    try:
        address = f'localhost:{server.port}'
        stats = rlds_reverb.push(episodes, address, 'replay')
        client = reverb.Client(address)
        size = client.server_info()['replay'].current_size
        _check(
            stats.episodes == _NUM_EPISODES and size == stats.items['replay'] > 0,
            f'push wrote {stats}, the table holds {size} items',
        )
        samples = [sample for sample in client.sample('replay', num_samples=_NUM_SAMPLES)]
        _check(len(samples) == _NUM_SAMPLES, f'sampled {len(samples)} of {_NUM_SAMPLES} items')
        beam_items = None
        if importlib.util.find_spec('apache_beam') is not None:
            result = rlds_reverb.push_with_beam(path, [address], 'beam')
            beam_items = client.server_info()['beam'].current_size
            _check(
                result.items == beam_items == size,
                f'Beam wrote {result.items} items, the table holds {beam_items}, push {size}',
            )
    finally:
        server.stop()
    return {
        'rlds_reverb': rlds_reverb.__version__,
        'rlds_reverb_file': rlds_reverb.__file__,
        'dataset': str(path),
        'tensorflow': tf.__version__,
        'episodes': stats.episodes,
        'steps': stats.steps,
        'items': size,
        'samples': len(samples),
        'beam_items': beam_items,
    }


if __name__ == '__main__':
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    print(json.dumps(run(sys.argv[1])))
