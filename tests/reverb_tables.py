"""The tables of the session Reverb server (`reverb_server` in conftest.py), and how to read them.

One table per case item: `case_table('two_step', case)` for each two-step case,
`'n_step'` for each n-step case, `'sequence'` for each sequence case without burn-in and
`'episode'` for each episode case, each with the signature of that case's items. Besides
them: `two_step` and `tf_agents` (two-step items of THREE_EPISODES), `episode_error`
(`Episode(3)` items, overflow an error), `tiny` (room for 2 items), `unsigned` (no
signature) and `queue` (a queue of 2). Every table but `queue` samples in insertion order
and removes what it samples, so `read_items(client, table)` returns exactly the items
written, in order.
"""

from __future__ import annotations

import numpy as np
import reverb
import tree

from rlds_reverb.serve import tables
from rlds_reverb.transform import items
from tests import builders
from tests.cases import n_step_cases, sequence_cases, two_step_cases
from tests.cases.episodes import THREE_EPISODES

TWO_STEP_CASES = two_step_cases.CASES
N_STEP_CASES = n_step_cases.CASES
# Windows of `push(item=items.Sequence(...))` (which has no burn-in).
SEQUENCE_CASES = [c for c in sequence_cases.CASES if 'burn_in' not in c['params']]
EPISODE_CASES = sequence_cases.EPISODE_CASES


def case_table(kind: str, case: dict) -> str:
    """The name of the table for a case's items ('two_step', 'n_step', 'sequence', 'episode')."""
    return f'{kind}:{case["testcase_name"]}'


def item_of(kind: str, case: dict) -> items.ItemKind:
    """The item kind a case's table holds."""
    if kind == 'two_step':
        return items.TwoStep()
    if kind == 'n_step':
        return items.NStep(**case['params'])
    if kind == 'sequence':
        return items.Sequence(**case['params'])
    return items.Episode(**case['params'])


def _case_items() -> dict[str, tuple[items.ItemKind, list]]:
    """Table name -> (item kind, episode specs) of every table with a signature."""
    layout = {
        'two_step': (items.TwoStep(), THREE_EPISODES),
        'tf_agents': (items.TwoStep(), THREE_EPISODES),
        'tiny': (items.TwoStep(), THREE_EPISODES),
        'episode_error': (
            items.Episode(sequence_cases.EPISODE_MAX_LENGTH),
            THREE_EPISODES,
        ),
    }
    for kind, cases in (
        ('two_step', TWO_STEP_CASES),
        ('n_step', N_STEP_CASES),
        ('sequence', SEQUENCE_CASES),
        ('episode', EPISODE_CASES),
    ):
        for case in cases:
            layout[case_table(kind, case)] = (item_of(kind, case), case['episodes'])
    return layout


def make_fifo_table(name: str, signature, max_size: int = 1000) -> reverb.Table:
    """A table that samples in insertion order and removes what it samples."""
    return reverb.Table(
        name=name,
        sampler=reverb.selectors.Fifo(),
        remover=reverb.selectors.Fifo(),
        max_size=max_size,
        rate_limiter=reverb.rate_limiters.MinSize(1),
        max_times_sampled=1,
        signature=signature,
    )


def make_tables() -> list[reverb.Table]:
    """Returns the session server's tables (see the module docstring)."""
    result = []
    for name, (kind, specs) in _case_items().items():
        signature = tables.signature_for(kind, builders.case_dataset(specs))
        result.append(make_fifo_table(name, signature, max_size=2 if name == 'tiny' else 1000))
    result.append(make_fifo_table('unsigned', None))
    two_step = tables.signature_for(items.TwoStep(), builders.case_dataset(THREE_EPISODES))
    result.append(reverb.Table.queue('queue', max_size=2, signature=two_step))
    return result


def clean_client(server: reverb.Server) -> reverb.Client:
    """Returns a client of `server` after emptying every table."""
    client = reverb.Client(f'localhost:{server.port}')
    for name in client.server_info():
        client.reset(name)
    return client


def table_size(client: reverb.Client, table: str) -> int:
    """The number of items `table` holds."""
    return client.server_info()[table].current_size


def read_items(client: reverb.Client, table: str) -> list:
    """Returns every item of a FIFO test table, in insertion order (removing them)."""
    size = table_size(client, table)
    if not size:
        return []
    samples = client.sample(
        table, num_samples=size, emit_timesteps=False, unpack_as_table_signature=True
    )
    return list(samples)


def as_lists(nest):
    """Returns a nest of NumPy-convertible leaves as nested lists (for exact comparisons)."""
    return tree.map_structure(lambda x: np.asarray(x).tolist(), nest)


# `rlds-reverb status` (tests/serve/test_status.py, tests/cli/test_status_command.py): one table
# of each kind, each holding two-step items of THREE_EPISODES (5 items per push).
STATUS_ITEMS_PER_PUSH = 5
# A sample-to-insert ratio of 1 within +-2 of 1 (min_diff -1, max_diff 3): after 3 inserts and
# no sample, the next insert blocks; after as many samples as inserts + 1, the next sample does.
STATUS_RATIO = {'min_size_to_sample': 1, 'samples_per_insert': 1.0, 'error_buffer': 2.0}


def make_status_tables() -> list[reverb.Table]:
    """Returns the tables of a server for `status` tests.

    uniform, prioritized (exponent 0.6), queue (a FIFO queue of 100) and small (uniform, room
    for 3) hold two-step items; ratio (uniform, `STATUS_RATIO`) and unsigned (uniform) take
    any item.
    """
    signature = tables.signature_for(items.TwoStep(), builders.case_dataset(THREE_EPISODES))
    return [
        tables.uniform('uniform', max_size=1000, signature=signature),
        tables.prioritized(
            'prioritized', priority_exponent=0.6, max_size=1000, signature=signature
        ),
        tables.fifo_queue('queue', max_size=100, signature=signature),
        tables.uniform('small', max_size=3, signature=signature),
        tables.uniform('ratio', max_size=1000, **STATUS_RATIO),
        tables.uniform('unsigned', max_size=1000),
    ]
