"""Export from a live server leaves the server's checkpoints as they were (issue 20, defect 3).

Reverb 0.14 deletes every other entry of a server's checkpoint directory when it
checkpoints, so an export that checkpointed the server removed the user's checkpoint, also
when the export then failed. Real in-process servers with checkpointers in tmp.
"""

from __future__ import annotations

import pathlib

import pytest
import reverb
from reverb.platform import checkpointers_lib

from rlds_reverb.core.errors import CheckpointError, ExportError
from rlds_reverb.export import reverb_export
from rlds_reverb.serve import checkpoints, tables
from rlds_reverb.transform import items
from rlds_reverb.write import push as push_lib
from tests import builders

ITEM = items.Episode(10)


def _episodes(first: int, count: int):
    return builders.rlds([builders.episode(3 + i, start=10.0 * i) for i in range(first, count)])


def _snapshot(directory: pathlib.Path) -> dict[str, bytes | None]:
    """Every entry under `directory`: relative path -> bytes (None for a directory)."""
    return {
        str(p.relative_to(directory)): p.read_bytes() if p.is_file() else None
        for p in sorted(directory.rglob('*'))
    }


def _start(checkpoint_dir: pathlib.Path, *, max_size: int = 1000) -> reverb.Server:
    signature = tables.signature_for(ITEM, _episodes(0, 1))
    table = tables.uniform('replay', max_size=max_size, signature=signature)
    checkpointer = checkpointers_lib.DefaultCheckpointer(str(checkpoint_dir))
    return reverb.Server([table], port=None, checkpointer=checkpointer)


@pytest.fixture
def users_server(tmp_path):
    """A server holding 2 episodes when its user checkpointed it, and 4 now."""
    ckpt = tmp_path / 'ckpt'
    ckpt.mkdir()
    server = _start(ckpt)
    address = f'localhost:{server.port}'
    push_lib.push(_episodes(0, 2), address, 'replay', item=ITEM)
    mine = pathlib.Path(reverb.Client(address).checkpoint())
    push_lib.push(_episodes(2, 4), address, 'replay', item=ITEM)
    yield server, address, ckpt, mine
    server.stop()


@pytest.mark.slow  # About 8 s.
def test_export_keeps_the_users_checkpoint(users_server, tmp_path):
    server, address, ckpt, mine = users_server
    before = _snapshot(ckpt)
    stats = reverb_export.export_table(
        tmp_path / 'out', 'replay', server=address, server_checkpoint_dir=ckpt
    )
    assert stats.episodes == 4  # The server as it is now.
    assert _snapshot(ckpt) == before
    # The user's checkpoint still reads back as what it held (2 episodes), and is what a
    # restarted server restores.
    again = reverb_export.export_table(tmp_path / 'mine', 'replay', checkpoint=mine)
    assert again.episodes == 2
    server.stop()
    restored = _start(ckpt)
    try:
        assert reverb.Client(f'localhost:{restored.port}').server_info()['replay'].current_size == 2
    finally:
        restored.stop()


def test_failed_exports_leave_the_checkpoints_as_they_were(users_server, tmp_path):
    _, address, ckpt, _ = users_server
    before = _snapshot(ckpt)
    with pytest.raises(ExportError, match=r"holds no table 'nope'; it holds \['replay'\]"):
        reverb_export.export_table(
            tmp_path / 'out', 'nope', server=address, server_checkpoint_dir=ckpt
        )
    assert _snapshot(ckpt) == before
    # A failure after the checkpoint was taken: the directory is as it was too.
    with pytest.raises(ExportError, match="names \\['agent'\\]"):
        reverb_export.export_table(
            tmp_path / 'out',
            'replay',
            server=address,
            server_checkpoint_dir=ckpt,
            episode_fields=('agent',),
        )
    assert _snapshot(ckpt) == before
    assert not (tmp_path / 'out').exists()
    assert not [p for p in tmp_path.iterdir() if 'kept-by-rlds-reverb-export' in p.name]


def test_export_from_a_server_needs_its_checkpoint_dir(users_server, tmp_path, run_cli):
    _, address, ckpt, _ = users_server
    before = _snapshot(ckpt)
    with pytest.raises(ValueError, match='Pass server_checkpoint_dir= with server='):
        reverb_export.export_table(tmp_path / 'out', 'replay', server=address)
    with pytest.raises(ValueError, match='server_checkpoint_dir= goes with server= only'):
        reverb_export.export_table(
            tmp_path / 'out', 'replay', checkpoint=ckpt, server_checkpoint_dir=ckpt
        )
    code, out, err = run_cli('export', '--server', address, '--table', 'replay', tmp_path / 'o')
    assert code == 2 and out == ''
    assert err.count('\n') == 1 and '--server needs --server-checkpoint-dir DIR' in err
    assert _snapshot(ckpt) == before


def test_private_checkpoints_refuse_directories_not_the_servers(users_server, tmp_path):
    _, address, ckpt, _ = users_server
    client = reverb.Client(address)
    with (
        pytest.raises(CheckpointError, match='does not exist'),
        checkpoints.take_private_checkpoint(client, tmp_path / 'missing'),
    ):
        pass
    # `serve --servers N` checkpoints server i to DIR/server-i: DIR is not a server's.
    (tmp_path / 'serve' / 'server-0').mkdir(parents=True)
    with (
        pytest.raises(CheckpointError, match='holds no Reverb checkpoint'),
        checkpoints.take_private_checkpoint(client, tmp_path / 'serve'),
    ):
        pass
    (tmp_path / 'other').mkdir()
    with (
        pytest.raises(CheckpointError, match='checkpoints to .*ckpt, not to .*other'),
        checkpoints.take_private_checkpoint(client, tmp_path / 'other'),
    ):
        pass
    # (Reverb then kept only the new checkpoint in the server's real directory.)
    assert not list((tmp_path / 'other').iterdir())


def test_entries_reverb_would_keep_instead_are_put_back(users_server):
    _, address, ckpt, mine = users_server
    (ckpt / 'zz-notes.txt').write_text('sorts after the timestamped checkpoints')
    before = _snapshot(ckpt)
    # Reverb keeps only the last entry by name: the notes, not the new checkpoint.
    with (
        pytest.raises(CheckpointError, match='sorts after it'),
        checkpoints.take_private_checkpoint(reverb.Client(address), ckpt),
    ):
        pass
    assert _snapshot(ckpt) == before
    assert (mine / 'DONE').is_file()


def test_a_private_checkpoint_is_removed_after_use(users_server):
    _, address, ckpt, _ = users_server
    before = _snapshot(ckpt)
    with checkpoints.take_private_checkpoint(reverb.Client(address), ckpt) as path:
        (table,) = checkpoints.read_table_checkpoints(path)
        assert table.table_name == 'replay'
        assert _snapshot(ckpt) == before  # Already while the copy is read.
    assert not path.exists()
    assert _snapshot(ckpt) == before


@pytest.mark.parametrize('add_ids', [False, True], ids=['in-order', 'ids'])
def test_partial_episodes_are_named_by_what_is_known(add_ids, tmp_path):
    # Episodes of 3, 4 and 5 steps give 2, 3 and 4 two-step items; a table of 5 evicts
    # episode 0 and the first 2 items of episode 1 (dataset index 1, steps 2..3 left).
    episodes = builders.rlds([builders.episode(n) for n in (3, 4, 5)])
    signature = tables.signature_for(items.TwoStep(), episodes, add_ids=add_ids)
    server = reverb.Server(
        [tables.uniform('replay', max_size=5, signature=signature)],
        checkpointer=checkpointers_lib.DefaultCheckpointer(str(tmp_path / 'ckpt')),
    )
    try:
        address = f'localhost:{server.port}'
        push_lib.push(episodes, address, 'replay', add_ids=add_ids, allow_eviction=True)
        client = reverb.Client(address)
        with pytest.raises(ExportError) as raised:
            reverb_export.export_table(tmp_path / 'out', 'replay', checkpoint=client.checkpoint())
    finally:
        server.stop()
    message = str(raised.value)
    if add_ids:
        assert '(episode 1 (its episode_id): 2 step(s) found (2..3), steps 0..3)' in message
    else:
        assert 'episode 0' not in message
        assert (
            "(the 1st episode in the table's insertion order (the items hold no episode ids, "
            'so its index in the dataset is unknown): 2 step(s) found, missing its beginning'
        ) in message


def test_the_checkpoint_layout_has_one_owner(users_server, tmp_path):
    # serve/checkpoints names Reverb's checkpoint files; no other module spells them.
    package = pathlib.Path(checkpoints.__file__).parents[1]
    literals = ("'DONE'", "'tables.tfrecord'", "'items.tfrecord'", "'chunks.tfrecord'", "'ZLIB'")
    spelled = sorted(
        str(path.relative_to(package))
        for path in package.rglob('*.py')
        if path.name != 'checkpoints.py' and any(s in path.read_text() for s in literals)
    )
    assert spelled == []
    # Its functions read what Reverb wrote, and a rewrite reads back the same.
    _, _, ckpt, mine = users_server
    assert checkpoints.is_complete_checkpoint(mine)
    assert not checkpoints.is_complete_checkpoint(ckpt)
    copy = tmp_path / 'copy'
    copy.mkdir()
    tables_before = checkpoints.read_table_checkpoints(mine)
    checkpoints.write_table_checkpoints(copy, tables_before)
    assert not checkpoints.is_complete_checkpoint(copy)
    checkpoints.mark_complete(copy)
    assert checkpoints.is_complete_checkpoint(copy)
    assert checkpoints.read_table_checkpoints(copy) == tables_before
    assert checkpoints.find_latest_checkpoint(tmp_path) == copy
