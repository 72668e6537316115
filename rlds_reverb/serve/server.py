"""Starting Reverb servers, restoring their tables from the latest checkpoint.

`start_server` starts a real `reverb.Server`. With a checkpoint directory, Reverb restores
the tables of the latest complete checkpoint there when it starts, and the server's
checkpoints go there too. Seeding a server from a dataset (push, then checkpoint) is
`rlds_reverb.write.seed.seed_server`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref

import reverb

from rlds_reverb.core import files
from rlds_reverb.serve import checkpoints

__all__ = [
    'start_server',
]


def start_server(
    server_tables: list[reverb.Table],
    *,
    port: int | None = None,
    checkpoint_dir: os.PathLike | str | None = None,
    reset_rate_limiters: bool = True,
) -> reverb.Server:
    """Starts a Reverb server; with `checkpoint_dir`, it restores the latest checkpoint there.

    Args:
      server_tables: The tables (a restored table takes its config from the checkpoint).
      port: The port; None picks a free one.
      checkpoint_dir: Where checkpoints live; the latest complete one is restored. Created
        0700 if missing (a checkpoint holds every item); an existing one keeps its mode.
        None: a private temporary directory, removed when the server stops (or the
        process ends).
      reset_rate_limiters: Rewrite the checkpoint's rate-limiter counters first
        (`checkpoints.reset_rate_limiters`), so that restored tables serve samples even if
        their limiters had blocked sampling when the checkpoint was written.

    Returns:
      The running server.

    Example:
      >>> server = start_server([tables.uniform('replay', max_size=1000)], port=8000)
    """
    if checkpoint_dir is not None:
        files.make_private_dirs(checkpoint_dir)
        if reset_rate_limiters:
            checkpoints.reset_rate_limiters(checkpoint_dir)
        checkpointer = reverb.checkpointers.DefaultCheckpointer(path=os.fspath(checkpoint_dir))
        return reverb.Server(server_tables, port=port, checkpointer=checkpointer)
    # Without a directory Reverb would make a temp dir of its own and never remove it; ours
    # (mkdtemp: 0700) goes when the server stops, is collected, or the process ends.
    scratch = tempfile.mkdtemp(prefix='rlds_reverb_server_')
    checkpointer = reverb.checkpointers.DefaultCheckpointer(path=scratch)
    running = _ScratchServer(server_tables, port=port, checkpointer=checkpointer)
    running.scratch_dir = scratch
    weakref.finalize(running, shutil.rmtree, scratch, ignore_errors=True)
    return running


class _ScratchServer(reverb.Server):
    """A `reverb.Server` whose private checkpoint directory is removed when it stops."""

    scratch_dir: str | None = None

    def stop(self):
        """Stops the server, then removes its private checkpoint directory."""
        try:
            return super().stop()
        finally:
            if self.scratch_dir is not None:
                shutil.rmtree(self.scratch_dir, ignore_errors=True)
