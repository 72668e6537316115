"""Who may read what the toolkit writes: directory modes and the world-writable bit.

Two kinds of directories (docs/security.md):

* private: where the toolkit chooses the place (temporary and staging directories, the
  demo's cache `~/.cache/rlds_reverb`) or holds a whole table (checkpoint directories it
  creates). Created 0700, whatever the umask: a checkpoint holds every item of a table.
* shared: where the user names the output (a dataset directory of `record` or `export`,
  the demo's plots). Created with the process umask, but never world-writable.

A directory that already exists is the user's and keeps its mode.

One rule for files, under any umask: no file the toolkit writes is world-writable where
another user can reach it, neither once written nor while it is written. A file is
written whole to a private temporary file beside its path and renamed into place with the
umask's mode minus world-write (`replace_file`, or `create_temporary_beside` and
`publish_file`); a file that a library opens by its name (TensorFlow's record writer) is
created first without the bit (`create_shared_file`); files that TensorFlow or Reverb
create themselves get 0666 minus the umask, so they are written inside a private directory
and lose the bit (`remove_world_write`) before the directory is shared.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import stat
import tempfile
from collections.abc import Iterator
from typing import IO, Any

# Helpers of the package's other modules only: nothing here is public API.
__all__: list[str] = []

PRIVATE_DIR_MODE = 0o700
# mkdir applies the umask on top of this: the user's choice, minus world-write.
_SHARED_DIR_MODE = 0o775
# A file's mode before the umask (and, for the toolkit's files, minus world-write).
SHARED_FILE_MODE = 0o666


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


def create_temporary_beside(path: os.PathLike | str) -> tuple[int, str]:
    """Creates an empty private (0600) temporary file in `path`'s directory, for `path`.

    Its name starts with a dot and `path`'s name, and ends in `.tmp`.

    Returns:
      `(open file descriptor, the temporary file's path)`.

    Raises:
      OSError: If the file cannot be created there (as `tempfile.mkstemp` raises it).

    Example:
      >>> handle, temporary = create_temporary_beside('report.html')
    """
    path = pathlib.Path(path)
    return tempfile.mkstemp(prefix=f'.{path.name}.', suffix='.tmp', dir=path.parent)


def publish_file(temporary: os.PathLike | str, path: os.PathLike | str) -> None:
    """Gives a written temporary file the shared mode and renames it to `path`, at once.

    The shared mode is 0666 minus the umask and minus world-write; `path`, if it exists, is
    replaced.

    Example:
      >>> publish_file(temporary, 'report.html')
    """
    os.chmod(temporary, compute_shared_mode(SHARED_FILE_MODE))
    os.replace(temporary, path)


@contextlib.contextmanager
def replace_file(path: os.PathLike | str, *, text: bool = False) -> Iterator[IO[Any]]:
    """Opens a private temporary file for `path`; on success, publishes it as `path`.

    `path` never holds half a file, and no one else can write (or read) the file while it
    is written; on an error the temporary file is removed and `path` left as it was.

    Args:
      path: The file to write (replaced if it exists); its directory must exist.
      text: Open in text mode (UTF-8) instead of binary.

    Yields:
      The open temporary file.

    Raises:
      OSError: If the file cannot be created in `path`'s directory.

    Example:
      >>> with replace_file('summary.json', text=True) as out:
      ...     out.write(json.dumps(summary))
    """
    handle, temporary = create_temporary_beside(path)
    try:
        with os.fdopen(handle, 'w' if text else 'wb', encoding='utf-8' if text else None) as out:
            yield out
        publish_file(temporary, path)
    except BaseException:
        pathlib.Path(temporary).unlink(missing_ok=True)
        raise


def create_shared_file(path: os.PathLike | str) -> pathlib.Path:
    """Creates `path` empty (or empties it), never world-writable, for a writer to open by name.

    For writers that create the file they write themselves (TensorFlow's `TFRecordWriter`
    takes 0666 minus the umask): opened on an existing file, they keep its mode. Symbolic
    links are not followed.

    Returns:
      `path` as a `pathlib.Path`.

    Example:
      >>> with tf.io.TFRecordWriter(os.fspath(create_shared_file(staging))) as writer: ...
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
    handle = os.open(path, flags, SHARED_FILE_MODE & ~stat.S_IWOTH)
    try:
        status = os.fstat(handle)
        if status.st_mode & stat.S_IWOTH and status.st_uid == os.getuid():
            os.fchmod(handle, compute_shared_mode(SHARED_FILE_MODE))
    finally:
        os.close(handle)
    return pathlib.Path(path)
