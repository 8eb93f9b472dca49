"""The files of :class:`ringloader.Parquet`: local paths and globs or http(s)/s3 URLs found,
remote files downloaded natively, and the memory-mapped Arrow copy of the columns used, kept
under the cache folder while the Parquet file is unchanged."""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
from typing import Any, Iterator, List, Optional, Tuple

from ..core._atomic import write_atomic


def _parquet_files(files_or_glob: Any) -> List[str]:
    """The Parquet files as given: local paths (a glob matched, sorted) or http(s)/s3 URLs
    (brace patterns such as ``part-{0000..0063}.parquet`` expanded; no glob: an object store
    is not listed)."""
    from ..core._remote import remote_scheme
    from ..core._shard_index import _expand_braces

    if isinstance(files_or_glob, (str, os.PathLike)):
        pattern = os.fspath(files_or_glob)
        if remote_scheme(pattern) is not None:
            files = _expand_braces(pattern)
        else:
            files = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
    else:
        files = [os.fspath(f) for f in files_or_glob]
    if not files:
        raise FileNotFoundError(f"Parquet({files_or_glob!r}): no file matches")
    for f in files:
        if remote_scheme(f) is not None:
            if any(c in f for c in "*?["):
                raise ValueError(f"Parquet: {f!r}: a URL cannot be a glob (an object store is "
                                 "not listed); name the files, or use a brace pattern "
                                 "such as part-{0000..0063}.parquet")
        elif not os.path.isfile(f):
            raise FileNotFoundError(f"Parquet: no such file {f!r}")
    return files


def _download(files: List[str], download_dir: Optional[str], ca_file: Optional[str],
              remote_options: Optional[dict]) -> List[str]:
    """The local path of each of ``files``: remote ones fetched natively into the shard cache
    (``download_dir``, default that of remote WebDataset shards; one download per file per
    node, kept there and read from there by later runs), local ones as they are."""
    from ..core._remote import RemoteFetcher, raise_if_fatal, remote_scheme

    remote = [f for f in files if remote_scheme(f) is not None]
    if not remote:
        return files
    fetcher = RemoteFetcher(download_dir, None, ca_file, remote_options)
    local = {}
    for url, result in zip(remote, fetcher.fetch(remote)):
        if "error" in result:
            raise_if_fatal(result, f"Parquet: cannot fetch {url}")
            raise OSError(f"Parquet: cannot fetch {url}: {result['error']}")  # after the retries
        local[url] = result["path"]
    return [local.get(f, f) for f in files]


def default_parquet_cache() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ringloader", "parquet")


def _footer_digest(f: Any, size: int) -> str:
    """A hash of a Parquet file's footer (its FileMetaData: the row groups, their offsets, sizes
    and statistics, and the schema), which a rewrite with other rows changes even where the
    size and modification time are kept."""
    f.seek(max(0, size - 8))
    tail = f.read(8)
    length = int.from_bytes(tail[:4], "little") if len(tail) == 8 else 0
    f.seek(max(0, size - 8 - length))
    return hashlib.sha256(f.read(length + 8)).hexdigest()


def _copy_names(path: str, read: List[str], cache_dir: str) -> Tuple[str, str]:
    """(the Arrow copy of the ``read`` columns of ``path`` as the file is now, the name prefix
    shared by every copy of those columns of that path). The key holds the size, modification
    and change times, inode and footer hash: a file rewritten in place or replaced (even with
    its size and mtime restored) gets a new copy."""
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        footer = _footer_digest(f, st.st_size)
    prefix = hashlib.sha256(json.dumps([os.path.abspath(path), read]).encode()).hexdigest()[:24]
    key = json.dumps([st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, footer])
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    return os.path.join(cache_dir, f"{prefix}-{digest}.arrow"), prefix


def _arrow_copy(path: str, read: List[str], cache_dir: str) -> Any:
    """The ``read`` columns of a Parquet file as a memory-mapped Arrow table. Parquet pages are
    compressed and length-prefixed, so rows cannot be referenced where they lie on disk: each
    row group is read once (one at a time: memory stays within a row group) into an Arrow IPC
    file under ``cache_dir``, kept for the next run while the Parquet file is unchanged, and
    mapped, so the rows' bytes live in the page cache, not in process memory."""
    import pyarrow as pa

    target, prefix = _copy_names(path, read, cache_dir)
    if not os.path.exists(target):
        os.makedirs(cache_dir, exist_ok=True)
        # Ranks on one machine start together: one converts, the others wait for its copy
        # instead of each reading every row group into a temporary file of their own.
        with _exclusive(os.path.join(cache_dir, prefix + ".lock")):
            if not os.path.exists(target):
                _convert(path, read, target)
                if _copy_names(path, read, cache_dir)[0] != target:
                    os.unlink(target)  # rows of no single version of the file
                    raise RuntimeError(f"Parquet: {path!r} changed while it was being read into "
                                       f"its Arrow copy under {cache_dir!r}; build the dataset "
                                       "again once the file is written")
                # Copies of an earlier version of the file would only take disk space (a
                # process that still maps one keeps its pages until it closes it).
                for old in glob.glob(os.path.join(glob.escape(cache_dir), prefix + "-*.arrow")):
                    if old != target:
                        try:
                            os.unlink(old)
                        except OSError:
                            pass
    return pa.ipc.open_file(pa.memory_map(target, "r")).read_all()


def _convert(path: str, read: List[str], target: str) -> None:
    """Writes the ``read`` columns of ``path`` into ``target``, one row group at a time. The
    file is opened here, after its key was taken: a version that replaced it since is seen
    by the check that follows, not copied under the earlier key."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    reader = pq.ParquetFile(path)
    schema = reader.schema_arrow
    schema = pa.schema([schema.field(c) for c in read])

    def write(f: Any) -> None:
        with pa.ipc.new_file(f, schema) as writer:
            for g in range(reader.num_row_groups):
                writer.write_table(reader.read_row_group(g, columns=read))

    write_atomic(target, write)


@contextlib.contextmanager
def _exclusive(lock_path: str) -> Iterator[None]:
    """Holds an exclusive ``flock`` on ``lock_path`` (created if missing) for the block; other
    processes, and other opens in this one, wait. Where the filesystem refuses locks (some
    network mounts) the block runs unlocked: the copy is still written atomically."""
    import fcntl

    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(lock_path, flags, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass
        yield
    finally:
        os.close(fd)  # releases the lock
