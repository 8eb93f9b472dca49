"""``pipe:`` shards of :class:`~ringloader.VideoShards`, written to files it reads in place.

A video member is decoded with seeks (a clip starts at the keyframe before its first frame), so
``VideoShards`` reads members as byte ranges of tar files. A ``pipe:COMMAND`` shard is a stream
with no ranges: its command is run once, at the dataset's construction, and its stdout written
to a file under the cache folder (``<cache_dir>/pipe-spools``), which is then indexed and read as
a local shard.

* The command runs under ``/bin/sh -c`` (stdin on /dev/null, a session of its own so that the
  whole pipeline is killed when it has to be); a command that exits with a nonzero status
  raises ``RuntimeError`` naming it, its status and the end of its stderr, and leaves no file.
* The copies of one :class:`PipeSpools` (one dataset's) are a group of files of their own
  (``spool-XXXX-<n>.tar``) beside a lock file (``spool-XXXX.lock``) that the group's process
  holds locked (``flock``, shared) while the group is in use, and its forked children with it.
  The group is removed when the ``PipeSpools`` is collected (the dataset and every
  ``VideoFile`` it gave hold it) or at exit, by the process that made it. A group whose lock
  nobody holds any more (its process died first) is removed by the next construction that
  spools in the folder. The lock, not a process id, tells: processes of other PID namespaces
  or hosts sharing the folder never remove each other's copies.
* ``cache_limit`` (when given) bounds the bytes of one group: a stream past it kills the
  command and raises ``ValueError`` naming the shard and the limit.
"""

from __future__ import annotations

import fcntl
import glob
import os
import signal
import subprocess
import tempfile
import weakref
from typing import Any, Dict, List, Optional

#: The cache folder's subfolder the copies are written in.
SPOOL_FOLDER = "pipe-spools"
#: Bytes of a failing command's stderr quoted in its error.
STDERR_TAIL = 2000
#: Bytes read from the command's stdout at a time.
CHUNK = 1 << 20


def _try_lock(path: str) -> Optional[int]:
    """An fd of ``path`` locked exclusively (nobody else holds it), or None."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def sweep(folder: str) -> None:
    """Removes the groups in ``folder`` whose lock nobody holds (their process is gone), and
    copies without a lock file (a group whose removal was cut short)."""
    for lock in glob.glob(os.path.join(glob.escape(folder), "spool-*.lock")):
        fd = _try_lock(lock)
        if fd is None:
            continue
        try:
            for copy in glob.glob(glob.escape(lock[:-len(".lock")]) + "-*.tar"):
                _unlink(copy)
            _unlink(lock)
        finally:
            os.close(fd)
    for copy in glob.glob(os.path.join(glob.escape(folder), "spool-*-*.tar")):
        group = os.path.basename(copy).rsplit("-", 1)[0]
        if not os.path.exists(os.path.join(folder, group + ".lock")):
            _unlink(copy)


def spool_folder(cache_dir: Optional[str]) -> str:
    """Where the copies of a dataset with ``cache_dir`` (None: the default cache) are written."""
    from ..core._remote import default_cache_dir

    return os.path.join(cache_dir or default_cache_dir(), SPOOL_FOLDER)


def _remove(copies: Dict[str, str], lock: List[Any], pid: int) -> None:
    """The group's removal, in the process that made it only (a forked child's copy of a
    ``PipeSpools`` is not its owner)."""
    if os.getpid() != pid:
        return
    for path in copies.values():
        _unlink(path)
    if lock:
        path, fd = lock
        _unlink(path)
        os.close(fd)


class PipeSpools:
    """One dataset's copies of its ``pipe:`` shards (see the module's docstring); ``kind``
    names the dataset in errors. Pickled, it carries the copies' paths but not their
    ownership: an unpickled one removes nothing."""

    def __init__(self, folder: str, cache_limit: int, kind: str):
        self.folder = folder  # spool_folder(cache_dir)
        self.limit = cache_limit  # bytes; 0: none
        self.kind = kind
        #: Per ``pipe:`` URL spooled: its copy (one per URL, however often the URL is given).
        self.copies: Dict[str, str] = {}
        self._bytes = 0  # the copies' sizes, summed
        self._lock: List[Any] = []  # [lock file, its fd] once the group exists
        self._finalizer = weakref.finalize(self, _remove, self.copies, self._lock, os.getpid())

    def close(self) -> None:
        """Removes the group now (in the process that made it)."""
        self._finalizer()

    def __getstate__(self) -> Dict[str, Any]:
        return {"folder": self.folder, "limit": self.limit, "kind": self.kind, "copies": dict(self.copies)}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._bytes, self._lock = 0, []

    def _group(self) -> str:
        """The group's path prefix, its lock file made and held first."""
        while not self._lock:
            os.makedirs(self.folder, exist_ok=True)
            sweep(self.folder)
            fd, lock = tempfile.mkstemp(prefix="spool-", suffix=".lock", dir=self.folder)
            fcntl.flock(fd, fcntl.LOCK_SH)
            if os.fstat(fd).st_nlink == 0:  # swept between its creation and its lock: anew
                os.close(fd)
                continue
            self._lock += [lock, fd]
        return self._lock[0][:-len(".lock")]

    def spool(self, url: str) -> str:
        """The file ``url``'s command (``pipe:COMMAND``) wrote its stdout to, the command run
        now unless this URL was spooled already. RuntimeError for a nonzero exit status,
        ValueError past ``cache_limit``, OSError naming the URL and the folder when the copy
        cannot be written."""
        if url in self.copies:
            return self.copies[url]
        try:
            path = f"{self._group()}-{len(self.copies)}.tar"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError as e:
            raise type(e)(e.errno, f"{self.kind}: cannot write the stream of {url!r} under "
                                   f"{self.folder} (cache_dir): {e.strerror}") from e
        try:
            self._bytes += self._write(url, fd)
        except BaseException:
            _unlink(path)
            raise
        self.copies[url] = path
        return path

    def _write(self, url: str, fd: int) -> int:
        """Runs the command into ``fd`` (closed after): the bytes written."""
        left = max(0, self.limit - self._bytes) if self.limit else -1
        size = 0
        with os.fdopen(fd, "wb") as out, tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(["/bin/sh", "-c", url[len("pipe:"):]], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=err, start_new_session=True)
            ended = False  # the stream read to its end
            try:
                while True:
                    chunk = proc.stdout.read(CHUNK)  # type: ignore[union-attr]
                    if not chunk:
                        ended = True
                        break
                    size += len(chunk)
                    if 0 <= left < size:
                        break
                    try:
                        out.write(chunk)
                    except OSError as e:  # a full disk, say
                        raise type(e)(e.errno, f"{self.kind}: writing the stream of {url!r} under "
                                               f"{self.folder} (cache_dir): {e.strerror}") from e
            finally:
                if not ended:  # past the limit, a write failed, or interrupted: all of it stops
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.stdout.close()  # type: ignore[union-attr]
                status = proc.wait()
            if 0 <= left < size:
                raise ValueError(
                    f"{self.kind}: {url!r} streams more than cache_limit allows ({self.limit} bytes "
                    f"for the dataset's pipe: shards, written under {self.folder}): raise cache_limit, "
                    f"or write the stream to a file and pass its path")
            if status != 0:
                err.seek(max(0, err.seek(0, os.SEEK_END) - STDERR_TAIL))
                tail = err.read().decode("utf-8", "replace").strip()
                how = f"was killed by signal {-status}" if status < 0 else f"exited with status {status}"
                raise RuntimeError(f"{self.kind}: the command of {url!r} {how}"
                                   + (f": {tail}" if tail else " (no stderr)"))
        return size


def missing(spools: Optional[PipeSpools]) -> bool:
    """True when some copy of ``spools`` is gone (an unpickled dataset whose maker has exited)."""
    return spools is not None and any(not os.path.isfile(p) for p in spools.copies.values())

