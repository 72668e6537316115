"""Which TCP ports a process listens on, and which processes a session left: from /proc.

Used by `run_cli` (tests/conftest.py) to check that no command leaves a server behind.
"""

from __future__ import annotations

import os

_LISTEN = '0A'  # The TCP state LISTEN in /proc/net/tcp{,6}.
_TABLES = ('/proc/net/tcp', '/proc/net/tcp6')


def _list_socket_inodes(pid: int | str) -> set[str]:
    """Returns the inodes of the sockets process `pid` has open."""
    inodes = set()
    directory = f'/proc/{pid}/fd'
    for fd in os.listdir(directory):
        try:
            target = os.readlink(os.path.join(directory, fd))
        except OSError:  # Closed meanwhile.
            continue
        if target.startswith('socket:['):
            inodes.add(target[len('socket:[') : -1])
    return inodes


def list_listening_ports(pid: int | str = 'self') -> set[int]:
    """Returns the TCP ports (IPv4 and IPv6) process `pid` listens on.

    Example:
      >>> server = reverb.Server([table]); server.port in list_listening_ports()
      True
    """
    inodes = _list_socket_inodes(pid)
    ports = set()
    for table in _TABLES:
        with open(table) as lines:
            next(lines)  # The header.
            for line in lines:
                fields = line.split()
                if fields[3] == _LISTEN and fields[9] in inodes:
                    ports.add(int(fields[1].rsplit(':', 1)[1], 16))
    return ports


def list_session_processes(session: int) -> list[int]:
    """Returns the live (not zombie) processes of session `session`."""
    found = []
    for name in os.listdir('/proc'):
        if not name.isdigit():
            continue
        try:
            with open(f'/proc/{name}/stat') as stat:
                fields = stat.read().rsplit(')', 1)[1].split()
        except OSError:  # Gone meanwhile.
            continue
        state, session_id = fields[0], int(fields[3])
        if session_id == session and state != 'Z':
            found.append(int(name))
    return found
