"""Pytest fixtures and helpers for Reverb tests: one real in-process server, FIFO reads.

Import in tests with `from tests.reverb_fixtures import *  # noqa` (or from conftest).
Every test table samples in insertion order and removes what it samples, so
`read_items(client, table)` returns exactly the items written, in order.
"""

from __future__ import annotations

import numpy as np
import pytest
import reverb
import tensorflow as tf

from rlds_reverb.core import types
from rlds_reverb.serve import tables
from rlds_reverb.transform import items
from tests import rlds_builders
from tests.cases import reverb_cases

__all__ = [
    'CASE_TABLES',
    'make_case_episodes',
    'make_case_steps',
    'make_window_items',
    'read_items',
    'reverb_client',
    'reverb_server',
]


def _make_case_steps(length: int, base: float, terminal: bool, discounts) -> dict:
    index = np.arange(length)
    return {
        types.OBSERVATION: (base + index).astype(np.float32).reshape(length, 1),
        types.ACTION: (base + index).astype(np.int64),
        types.REWARD: (base + index).astype(np.float32),
        types.DISCOUNT: np.asarray(discounts, np.float32),
        types.IS_FIRST: index == 0,
        types.IS_LAST: index == length - 1,
        types.IS_TERMINAL: (index == length - 1) & terminal,
    }


def make_case_steps() -> list[dict]:
    """Returns the case episodes' steps as `[T, ...]` NumPy arrays."""
    return [_make_case_steps(**episode) for episode in reverb_cases.EPISODES]


def make_case_episodes(indices=None) -> tf.data.Dataset:
    """Returns the case episodes (or those at `indices`) as an RLDS dataset."""
    all_steps = make_case_steps()
    chosen = [all_steps[i] for i in (indices if indices is not None else range(len(all_steps)))]
    return rlds_builders.make_rlds(chosen)


def make_window_items(windows) -> list[dict]:
    """Returns the expected step-window items (with `mask`) for (episode, step) windows."""
    all_steps = make_case_steps()
    expected = []
    for window in windows:
        rows = []
        for ref in window:
            if ref is None:
                rows.append(
                    {**{k: np.zeros_like(v[0]) for k, v in all_steps[0].items()}, types.MASK: False}
                )
            else:
                steps = all_steps[ref[0]]
                rows.append({**{k: v[ref[1]] for k, v in steps.items()}, types.MASK: True})
        expected.append({k: np.stack([r[k] for r in rows]) for k in rows[0]})
    return expected


def _test_table(name: str, signature, max_size: int = 1000) -> reverb.Table:
    return reverb.Table(
        name=name,
        sampler=reverb.selectors.Fifo(),
        remover=reverb.selectors.Fifo(),
        max_size=max_size,
        rate_limiter=reverb.rate_limiters.MinSize(1),
        max_times_sampled=1,
        signature=signature,
    )


def _make_case_items() -> dict[str, items.ItemKind]:
    kinds = {
        'two_step': items.TwoStep(),
        'tf_agents': items.TwoStep(),
        'n_step': items.NStep(**reverb_cases.N_STEP),
        'episode_error': items.Episode(reverb_cases.EPISODE_MAX_LENGTH),
    }
    for case in reverb_cases.SEQUENCE_CASES:
        kinds[f'seq_{case["testcase_name"]}'] = items.Sequence(
            case['length'], case['period'], case['end']
        )
    for case in reverb_cases.EPISODE_CASES:
        kinds[f'episode_{case["testcase_name"]}'] = items.Episode(
            reverb_cases.EPISODE_MAX_LENGTH, case['overflow']
        )
    return kinds


CASE_TABLES = _make_case_items()


@pytest.fixture(scope='session')
def reverb_server():
    """A real Reverb server on a loopback port with one FIFO-read table per case item."""
    episodes = make_case_episodes()
    test_tables = [
        _test_table(name, tables.signature_for(kind, episodes))
        for name, kind in CASE_TABLES.items()
    ]
    two_step = tables.signature_for(items.TwoStep(), episodes)
    test_tables.append(_test_table('tiny', two_step, max_size=2))
    test_tables.append(_test_table('unsigned', None))
    test_tables.append(reverb.Table.queue('queue', max_size=2, signature=two_step))
    server = reverb.Server(test_tables, port=None)
    yield server
    server.stop()


@pytest.fixture
def reverb_client(reverb_server):
    """A client of `reverb_server`, with every table emptied before the test."""
    return make_clean_client(reverb_server)


def make_clean_client(server: reverb.Server) -> reverb.Client:
    """Returns a client of `server` after emptying every table."""
    client = reverb.Client(f'localhost:{server.port}')
    for name in client.server_info():
        client.reset(name)
    return client


def read_items(client: reverb.Client, table: str) -> list:
    """Returns every item of a FIFO test table, in insertion order (removing them)."""
    size = client.server_info()[table].current_size
    if not size:
        return []
    samples = client.sample(
        table, num_samples=size, emit_timesteps=False, unpack_as_table_signature=True
    )
    return [sample for sample in samples]
