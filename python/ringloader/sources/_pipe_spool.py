"""``pipe:`` shards of :class:`~ringloader.VideoShards`, written to files it reads in place.

A video member is decoded with seeks (a clip starts at the keyframe before its first frame), so
``VideoShards`` reads members as byte ranges of tar files. A ``pipe:COMMAND`` shard is a stream
with no ranges: its command is run once, at the dataset's construction, and its stdout written
straight to a file of this process under the cache folder (``<cache_dir>/pipe-spools``), which
is then indexed and read as a local shard.

* The command runs as ``rl.WebDataset`` runs it (``/bin/sh -c``, stdin on /dev/null, its own
  process group); a command that exits with a nonzero status raises ``RuntimeError`` naming it,
  its status and the end of its stderr, and leaves no file.
* Each dataset's copies are its own (``<pid>-<random>.tar``, never shared between datasets or
  processes: ranks of one node spooling the same command do not replace each other's files),
  removed when the dataset is garbage-collected or its process exits, in the process that made
  them only (a forked worker never removes them). Copies left by a process that died without
  removing them are removed by the next construction that spools in that folder.
* ``cache_limit`` (when given) bounds the bytes of one dataset's copies: a stream past it kills
  the command and raises ``ValueError`` naming the shard and the limit.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import weakref
from typing import Any, List, Optional

#: The cache folder's subfolder the copies are written in.
SPOOL_FOLDER = "pipe-spools"
#: Bytes of a failing command's stderr quoted in its error.
STDERR_TAIL = 2000
#: Bytes read from the command's stdout at a time.
CHUNK = 1 << 20


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def sweep(folder: str) -> None:
    """Removes the copies in ``folder`` whose process (the name's ``<pid>-`` prefix) is gone."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        pid, _, rest = name.partition("-")
        if not (pid.isdigit() and rest.endswith(".tar")) or _alive(int(pid)):
            continue
        try:
            os.unlink(os.path.join(folder, name))
        except OSError:
            pass


def _remove(paths: List[str], pid: int) -> None:
    if os.getpid() != pid:  # a forked child's copy of the dataset: the files are its parent's
        return
    for path in paths:
        try:
            os.unlink(path)
        except OSError:
            pass


class PipeSpools:
    """The copies of one dataset's ``pipe:`` shards (see the module's docstring). ``owner``: the
    dataset whose collection removes them; ``kind`` names it in errors."""

    def __init__(self, owner: Any, cache_dir: Optional[str], cache_limit: int, kind: str):
        from ..core._remote import default_cache_dir

        self.folder = os.path.join(cache_dir or default_cache_dir(), SPOOL_FOLDER)
        self.limit = cache_limit  # bytes; 0: none
        self.kind = kind
        #: The copies written so far (removed with the owner).
        self.paths: List[str] = []
        self._finalizer = weakref.finalize(owner, _remove, self.paths, os.getpid())

    def spool(self, url: str) -> str:
        """Runs ``url``'s command (``pipe:COMMAND``) and returns the file its stdout was written
        to. RuntimeError for a nonzero exit status, ValueError past ``cache_limit``."""
        command = url[len("pipe:"):]
        os.makedirs(self.folder, exist_ok=True)
        if not self.paths:
            sweep(self.folder)
        fd, path = tempfile.mkstemp(prefix=f"{os.getpid()}-", suffix=".tar", dir=self.folder)
        self.paths.append(path)
        left = max(0, self.limit - sum(map(os.path.getsize, self.paths[:-1]))) if self.limit else -1
        size = 0
        with os.fdopen(fd, "wb") as out, tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(["/bin/sh", "-c", command], stdin=subprocess.DEVNULL,
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
                    out.write(chunk)
            finally:
                if not ended:  # past the limit, or interrupted: the whole pipeline stopped
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.stdout.close()  # type: ignore[union-attr]
                status = proc.wait()
                if not ended and not 0 <= left < size:
                    self._drop(path)
            if 0 <= left < size:
                self._drop(path)
                raise ValueError(
                    f"{self.kind}: {url!r} streams more than cache_limit allows ({self.limit} bytes "
                    f"for the dataset's pipe: shards, written under {self.folder}): raise cache_limit, "
                    f"or write the stream to a file and pass its path")
            if status != 0:
                err.seek(max(0, err.seek(0, os.SEEK_END) - STDERR_TAIL))
                tail = err.read().decode("utf-8", "replace").strip()
                self._drop(path)
                how = f"was killed by signal {-status}" if status < 0 else f"exited with status {status}"
                raise RuntimeError(f"{self.kind}: the command of {url!r} {how}"
                                   + (f": {tail}" if tail else " (no stderr)"))
        return path

    def _drop(self, path: str) -> None:
        self.paths.remove(path)
        try:
            os.unlink(path)
        except OSError:
            pass

