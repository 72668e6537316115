"""Who may read what the toolkit writes: directory modes and the world-writable bit.

Two kinds of directories (README, Security):

* private: where the toolkit chooses the place (temporary and staging directories, the
  demo's cache `~/.cache/rlds_reverb`) or holds a whole table (checkpoint directories it
  creates). Created 0700, whatever the umask: a checkpoint holds every item of a table.
* shared: where the user names the output (a dataset directory of `record` or `export`,
  the demo's plots). Created with the process umask, but never world-writable.

A directory that already exists is the user's and keeps its mode. Files written through
TensorFlow or Reverb get 0666 minus the umask; `remove_world_write` takes the world-write
bit off what the toolkit wrote.
"""

from __future__ import annotations

import os
import pathlib
import stat

# Helpers of the package's other modules only: nothing here is public API.
__all__: list[str] = []

PRIVATE_DIR_MODE = 0o700
# mkdir applies the umask on top of this: the user's choice, minus world-write.
_SHARED_DIR_MODE = 0o775


def _make_missing_dirs(path: os.PathLike | str, mode: int) -> pathlib.Path:
    """Creates `path` and its missing parents with `mode` (minus the umask); returns it."""
    path = pathlib.Path(path).expanduser().absolute()
    missing = []
    for directory in (path, *path.parents):
        if directory.exists():
            break
        missing.append(directory)
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=mode)
        except FileExistsError:  # Created meanwhile by someone else: theirs, left alone.
            continue
        if mode == PRIVATE_DIR_MODE:
            os.chmod(directory, PRIVATE_DIR_MODE)  # Exactly 0700, even under an odd umask.
    if not path.is_dir():
        raise NotADirectoryError(f'{path} exists and is not a directory.')
    return path


def make_private_dirs(path: os.PathLike | str) -> pathlib.Path:
    """Creates `path` and its missing parents readable by their owner only (0700).

    Directories that exist already keep their mode.

    Returns:
      The absolute path.

    Raises:
      NotADirectoryError: If `path` exists and is not a directory.

    Example:
      >>> make_private_dirs('/tmp/ckpt')
    """
    return _make_missing_dirs(path, PRIVATE_DIR_MODE)


def make_shared_dirs(path: os.PathLike | str) -> pathlib.Path:
    """Creates `path` and its missing parents as the umask says, never world-writable.

    Directories that exist already keep their mode.

    Returns:
      The absolute path.

    Raises:
      NotADirectoryError: If `path` exists and is not a directory.

    Example:
      >>> make_shared_dirs('/data/cartpole_v1')
    """
    return _make_missing_dirs(path, _SHARED_DIR_MODE)


def read_umask() -> int:
    """Returns the process umask (from /proc where it can, without changing it)."""
    try:
        with open('/proc/self/status') as status:
            for line in status:
                if line.startswith('Umask:'):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    umask = os.umask(0o022)  # Elsewhere the only way to read it is to set it.
    os.umask(umask)
    return umask


def compute_shared_mode(mode: int = _SHARED_DIR_MODE) -> int:
    """Returns `mode` minus the umask and the world-write bit (for chmod, which ignores it)."""
    return mode & ~read_umask() & ~stat.S_IWOTH


def remove_world_write(path: os.PathLike | str) -> None:
    """Takes the world-write bit off `path` and, for a directory, everything inside it.

    Symbolic links are not followed (a link's target is not ours), and entries of another
    owner are left alone.

    Example:
      >>> remove_world_write(staging_dir)
    """
    root = pathlib.Path(path)
    entries = [root]
    if root.is_dir() and not root.is_symlink():
        for parent, dirs, names in os.walk(root):  # Does not follow links.
            entries += [pathlib.Path(parent, name) for name in (*dirs, *names)]
    for entry in entries:
        status = entry.lstat()
        mode = status.st_mode
        if stat.S_ISLNK(mode) or not mode & stat.S_IWOTH or status.st_uid != os.getuid():
            continue
        os.chmod(entry, stat.S_IMODE(mode) & ~stat.S_IWOTH)
