"""Every timeout default of the toolkit, in one place, in milliseconds.

Each entry point takes its own `timeout_ms`-style option; when the caller gives none, the
default comes from here, so the library, the command line and the docs cannot disagree.
Loads without TensorFlow (the command line's parser reads it).
"""

from __future__ import annotations

__all__ = [
    'CHECKPOINT_PROBE_MS',
    'CONNECT_MS',
    'EXPORT_MS',
    'LEARNER_SERVER_INFO_MS',
    'LEARNER_STOP_CHECK_MS',
    'OBSERVER_SERVER_INFO_MS',
    'PUSH_MS',
    'RESUME_COUNT_MS',
    'STATUS_MS',
    'TABLE_COPY_SERVER_INFO_MS',
    'WAIT_SLICE_MS',
    'WRITER_RELEASE_MS',
]

# The most any wait on a live server may take during a push (server info, flush, end of
# episode): `PushOptions.timeout_ms`, `rlds-reverb push/serve --timeout-ms`.
PUSH_MS = 60_000
# The same for an export from a live server (`export_table`, `rlds-reverb export`).
EXPORT_MS = 60_000
# How long a TCP connection to a server's port may take before the server is named dead:
# Reverb's own calls cannot tell a dead server from a slow one (`serve.table_info`).
CONNECT_MS = 3_000
# `rlds-reverb status` and `fetch_server_status`: the server-info call and the samples.
STATUS_MS = 10_000
# `LearnerDataset(server_info_timeout_ms=)`: the server-info call made per server.
LEARNER_SERVER_INFO_MS = 30_000
# A learner's sample stream waits on a rate limiter in slices of this, checking between them
# whether it was asked to stop (Ctrl-C, `LearnerDataset.stop`): `learn.stopping`.
LEARNER_STOP_CHECK_MS = 1_000
# TF-Agents-compatible observers: the signature lookup when the observer is built.
OBSERVER_SERVER_INFO_MS = 60_000
# `write.resume.count_inserted`: reading a table's insert count.
RESUME_COUNT_MS = 10_000
# A table copy's server-info call (`export.table_copy`).
TABLE_COPY_SERVER_INFO_MS = 30_000
# The Beam pipeline's probe of each server before it writes (`distribute`).
CHECKPOINT_PROBE_MS = 2_000
# Waits on a live server are made in slices of this, probing the server between them, so a
# server that dies mid-wait is named within a slice (`write.engines.wait_on_server`).
WAIT_SLICE_MS = 1_000
# How long releasing a writer may wait for its pending items (`write.engines`).
WRITER_RELEASE_MS = 1_000
