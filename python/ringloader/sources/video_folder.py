"""``VideoFolder``: class folders of video files (the layout of torchvision's Kinetics and UCF101
folders), each sample a ``ringloader.video.VideoFile`` reference and its class index; and
``VideoShards``: tar shards of video members, each sample a ``VideoFile`` over its member's bytes
in the shard."""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from ..transforms import clips as _clips
from ._pipe_spool import PipeSpools, missing, spool_folder
from .datasets import _make_dataset, find_classes

try:
    from torch.utils.data import Dataset as _TorchDataset
except ImportError:  # torch is only needed to iterate
    _TorchDataset = object  # type: ignore[assignment,misc]

__all__ = ["VIDEO_EXTENSIONS", "VIDEO_MEMBER_EXTS", "VideoFolder", "VideoShards"]

#: The file name endings :class:`VideoFolder` keeps by default (compared lower-cased).
VIDEO_EXTENSIONS: Tuple[str, ...] = (".avi", ".m4v", ".mkv", ".mov", ".mp4", ".webm")


class VideoFolder(_TorchDataset):
    """Class folders of video files: ``root/<class>/**/<video>``, the layout of torchvision's
    Kinetics and UCF101 folders. Classes, their indices and the sample order are exactly
    torchvision's ``DatasetFolder``'s on the same tree: sorted class folders, each walked in
    sorted order following symbolic links, a file kept when its name ends with one of
    ``extensions`` (case-insensitive) or when ``is_valid_file(path)`` says so.

    ``dataset[i]`` is ``(ringloader.video.VideoFile(path, clip=clip, transform=transform),
    target)``: a reference to the video, whose ``decode()`` returns the clip's frames, and the
    class index after ``target_transform``. ``rl.DataLoader(VideoFolder(...))`` batches the clips
    in native threads (``ringloader.video_batches``) when ``transform`` is None or v2's video
    steps that run natively, else decodes each reference in torch's worker processes (a
    ``FallbackWarning`` says so); either way its clip is drawn from ``clips.generator_for`` of
    the sample's key.

    Args:
        root: the folder holding one sub-folder per class.
        transform: the transform each ``VideoFile`` carries.
        clip: which frames each ``VideoFile`` decodes, handed to it as given: a
            :mod:`ringloader.clips` sampler (e.g. ``clips.random_indices(num_frames_per_clip=16,
            num_indices_between_frames=4)``), a list of frame indices or a list of such lists;
            ``None``: every frame.
        extensions: file name endings to keep (default :data:`VIDEO_EXTENSIONS`).
        target_transform: a callable applied to each class index.
        is_valid_file: ``fn(path) -> bool`` choosing the files instead of ``extensions``.
        allow_empty: keep going when a class folder holds no video (torchvision's flag).

    Raises:
        FileNotFoundError: ``root`` is not a directory, holds no class folder, or (without
            ``allow_empty``) a class folder holds no video; the message names the folder.
        ValueError: both ``is_valid_file`` and ``extensions`` other than the default given, or
            neither.

    Examples:
        >>> import os
        >>> import ringloader as rl
        >>> root = os.path.abspath("videos")
        >>> for name in ("archery/a.mp4", "archery/b.MKV", "bowling/c.avi", "bowling/notes.txt"):
        ...     os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
        ...     open(os.path.join(root, name), "wb").close()
        >>> ds = rl.VideoFolder(root, clip=rl.clips.random_indices(num_frames_per_clip=8))
        >>> ds.classes, len(ds), ds.targets
        (['archery', 'bowling'], 3, [0, 0, 1])
        >>> [os.path.relpath(path, root) for path, _ in ds.samples]
        ['archery/a.mp4', 'archery/b.MKV', 'bowling/c.avi']
    """

    def __init__(
        self,
        root: Union[str, "os.PathLike[str]"],
        transform: Any = None,
        clip: Any = None,
        extensions: Optional[Tuple[str, ...]] = VIDEO_EXTENSIONS,
        target_transform: Optional[Callable[[int], Any]] = None,
        is_valid_file: Optional[Callable[[str], bool]] = None,
        allow_empty: bool = False,
    ):
        if is_valid_file is not None and extensions is VIDEO_EXTENSIONS:
            extensions = None  # the default gives way to the caller's choice
        if (extensions is None) == (is_valid_file is None):
            raise ValueError("VideoFolder: pass extensions or is_valid_file, not both (and not "
                             "neither)")
        root = os.path.expanduser(os.fspath(root))
        if not os.path.isdir(root):
            raise FileNotFoundError(f"VideoFolder root {root!r} is not a directory")
        self.root = root
        self.transform = transform
        self.target_transform = target_transform
        if clip is not None:
            _clips.as_sampler(clip)  # a bad clip fails here, where it is written
        self.clip = clip
        self.extensions = extensions
        classes, class_to_idx = self.find_classes(root)
        if is_valid_file is None:
            suffixes = extensions if isinstance(extensions, str) else tuple(extensions)
            is_valid_file = lambda path: path.lower().endswith(suffixes)  # noqa: E731
        paths, labels = _make_dataset(root, class_to_idx, is_valid_file, allow_empty, extensions)
        self.classes: List[str] = classes
        self.class_to_idx: Dict[str, int] = class_to_idx
        self.samples: List[Tuple[str, int]] = list(zip(paths, labels))
        self.targets: List[int] = labels

    def find_classes(self, directory: str) -> Tuple[List[str], Dict[str, int]]:
        """The class folders of ``directory``, sorted, and their indices (torchvision's); a
        subclass may override it, as with torchvision."""
        return find_classes(directory)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> Tuple[Any, Any]:
        path, target = self.samples[index]
        try:
            from .video import VideoFile
        except ImportError as error:
            raise ImportError(
                f"VideoFolder[{index}] ({path}) needs ringloader.video.VideoFile, which this "
                f"build of ringloader lacks ({error}); the folder's samples, classes and targets "
                "work without it") from error
        if self.target_transform is not None:
            target = self.target_transform(target)
        return VideoFile(path, clip=self.clip, transform=self.transform), target

    def __repr__(self) -> str:
        return (f"VideoFolder({self.root!r}: {len(self)} videos, {len(self.classes)} classes, "
                f"clip={self.clip!r})")


#: The member extensions :class:`VideoShards` reads by default, in order of preference.
VIDEO_MEMBER_EXTS: Tuple[str, ...] = ("mp4", "mkv", "webm", "avi", "mov")


class VideoShards(_TorchDataset):
    """WebDataset tar shards whose samples are videos: members grouped by key as
    ``rl.WebDataset`` groups them (``clip0.mp4`` + ``clip0.cls``), the video being the member
    with the first of ``video_exts`` present, the label its ``label_key`` member (``"cls"`` or
    ``"txt"``: an integer; ``"json"``: the ``label_field`` field; ``""``: none, labels -1).

    ``dataset[i]`` is ``(ringloader.video.VideoFile(shard, byte_range=(offset, length),
    name="shard:member", clip=clip, transform=transform), target)``: the member's bytes read in
    place from the uncompressed tar (never extracted), so ``rl.DataLoader`` batches the clips in
    native threads as for a :class:`VideoFolder`, the pixels those of the member's file.

    Shards are local tar files (paths, globs, brace patterns as ``rl.WebDataset`` takes them)
    or remote ones (``http://``, ``https://``, ``s3://``), indexed natively at construction
    from their tar headers. A remote shard is downloaded whole at construction into
    ``rl.WebDataset``'s node-local cache (``cache_dir``, ``cache_limit``, ``ca_file``,
    ``remote_options`` as it takes them: verified, written atomically, a copy cut short by the
    server fetched again), and its members are read in place from the cached copy; errors name
    the URL (a 403/404 raises at construction, a shard still failing after the retries
    ``ConnectionError``). A ``pipe:COMMAND`` shard (a stream has no byte ranges to read in
    place) is run once, at construction (once per URL), its stdout written to a file of this
    dataset's under the cache folder (``<cache_dir>/pipe-spools``) and read in place from it;
    the copies live as long as the dataset or a ``VideoFile`` it gave (removed then, or at the
    process's exit; a pickled dataset unpickled after that runs the commands again), and a
    command that exits with a nonzero status raises ``RuntimeError`` naming it, its status and
    the end of its stderr. Each local shard's size and mtime are recorded before it is indexed, and each
    remote shard's object size and ETag: a shard rewritten since (a remote one whose copy, no
    longer the one this process verified, comes back from the server as another object) raises
    ``rl.StaleIndexError`` naming it (at ``iter()`` of ``rl.DataLoader``, when one of its
    samples is read and when a ``VideoFile`` it gave decodes; :meth:`check_unchanged`) rather
    than read other bytes at its recorded ranges; build the dataset again to index it anew. A
    sample without a video member or label, and the cut end of a truncated shard, raise
    ``ValueError`` naming the shard and member when read (``dataset[i]``); under
    ``rl.DataLoader`` that is the sample's error under ``on_error``, as a bad clip's.

    Args:
        urls: a shard path, glob or brace pattern, a ``pipe:COMMAND`` or a remote URL, or a
            list of them.
        transform: the transform each ``VideoFile`` carries (see :class:`VideoFolder`).
        clip: which frames each ``VideoFile`` decodes (see :class:`VideoFolder`).
        label_key: the label member's extension (as ``rl.WebDataset``'s).
        label_field: the label's field of a ``.json`` label member.
        video_exts: member extensions that are videos, in order of preference.
        target_transform: a callable applied to each label.
        classes: the class names (default: ``classes.json`` beside the first shard when it is
            local, else the labels' numbers).
        cache_dir: where remote shards are cached (``rl.WebDataset``'s, docs/remote.md) and
            ``pipe:`` shards written.
        cache_limit: the remote shards' cache folder's limit (bytes or a size like ``"50GB"``;
            None: none); also the most bytes this dataset's ``pipe:`` copies may hold (ValueError
            past it), each dataset's on its own.
        ca_file: the CA bundle https uses.
        remote_options: the downloader's settings, as ``rl.WebDataset`` takes them.

    Examples:
        >>> import io, tarfile
        >>> import ringloader as rl
        >>> with tarfile.open("videos.tar", "w") as tar:
        ...     for name, data in (("a.mp4", b"..."), ("a.cls", b"1")):
        ...         info = tarfile.TarInfo(name)
        ...         info.size = len(data)
        ...         tar.addfile(info, io.BytesIO(data))
        >>> ds = rl.VideoShards("videos.tar")
        >>> len(ds), ds.targets, ds.samples[0][1]
        (1, [1], 'a.mp4')
    """

    def __init__(self, urls: Any, transform: Any = None, clip: Any = None, *, label_key: str = "cls",
                 label_field: str = "label", video_exts: Tuple[str, ...] = VIDEO_MEMBER_EXTS,
                 target_transform: Optional[Callable[[int], Any]] = None, classes: Optional[List[str]] = None,
                 cache_dir: Optional[str] = None, cache_limit: Any = None, ca_file: Optional[str] = None,
                 remote_options: Optional[Dict[str, Any]] = None):
        from ..core import _remote
        from ..core._shard_index import _expand

        if clip is not None:
            _clips.as_sampler(clip)
        exts = [str(e).lower().lstrip(".") for e in ([video_exts] if isinstance(video_exts, str) else video_exts)]
        self.transform, self.clip, self.target_transform = transform, clip, target_transform
        #: Per sample: (shard URL or path, member, offset, length, label, error: "" when readable).
        self.samples: List[Tuple[str, str, int, int, int, str]] = []
        expanded = _expand(urls)
        self.urls = [url for url, _ in expanded]
        #: Per shard: True when it is the stdout of a ``pipe:`` command written in ``urls``.
        self.url_pipes: List[bool] = [pipe for _, pipe in expanded]
        #: Per shard: the file its members are read from (a remote shard's copy in the cache, a
        #: pipe: shard's copy of its command's stdout).
        self.shard_paths: List[str] = list(self.urls)
        for url, pipe in expanded:  # before any command runs or download starts
            if not pipe and _remote.remote_scheme(url) is None and not os.path.isfile(url):
                raise FileNotFoundError(f"VideoShards shard {url!r} does not exist")
        #: The copies of the pipe: shards (``_pipe_spool.PipeSpools``), or None without any:
        #: each command run once now (once per URL), its stream written to a file then read as
        #: a local shard. The dataset and each VideoFile it gives keep them.
        self._spools: Optional[PipeSpools] = None
        if any(self.url_pipes):
            self._spools = PipeSpools(spool_folder(cache_dir), _remote.cache_limit_bytes(cache_limit),
                                      "VideoShards")
        try:
            self._read_shards(urls, exts, label_key, label_field, classes, cache_dir, cache_limit,
                              ca_file, remote_options)
        except BaseException:
            if self._spools is not None:  # a dataset not built leaves no copy
                self._spools.close()
            raise

    def _read_shards(self, urls: Any, exts: List[str], label_key: str, label_field: str,
                     classes: Optional[List[str]], cache_dir: Optional[str], cache_limit: Any,
                     ca_file: Optional[str], remote_options: Optional[Dict[str, Any]]) -> None:
        """The rest of the construction: the pipe: shards spooled, the remote ones fetched, each
        indexed; ``samples``, ``targets`` and ``classes`` filled."""
        from .. import _C
        from ..core import _remote
        from ..core._shard_index import classes_file
        from ._remote_shards import RemoteShards

        for s, pipe in enumerate(self.url_pipes):
            if pipe:
                self.shard_paths[s] = self._spools.spool(self.urls[s])  # type: ignore[union-attr]
        #: The remote shards (http(s)://, s3://), fetched into the cache as rl.WebDataset's are
        #: (the same object, ``_remote_shards.RemoteShards``), or None without any.
        self._remote: Optional[Any] = None
        remote = [s for s, url in enumerate(self.urls) if _remote.remote_scheme(url) is not None]
        if remote:
            self._remote = RemoteShards(self.urls, self.shard_paths,
                                        _remote.RemoteFetcher(cache_dir, cache_limit, ca_file, remote_options),
                                        (tuple(exts), label_key, label_field, None), kind="VideoShards")
            # Each remote shard downloaded whole now (its index is its tar headers): a 403/404
            # raises, one still failing after the retries raises ConnectionError naming it.
            self._remote._raise_unknown(self._remote.fetch(remote, construction=True))
        elif cache_dir is not None or cache_limit is not None:
            _remote.cache_limit_bytes(cache_limit)  # a bad value is an error whatever the urls
        #: Per shard: (size, mtime_ns) of a local shard before it was indexed
        #: (``_shard_index.shard_stat``), what :meth:`check_unchanged` compares with; None for a
        #: remote one (its identity is the object's size and ETag, which the cache checks).
        self.shard_stats: List[Optional[Tuple[int, int]]] = []
        self._scan_args = (exts, label_key, label_field)
        for s in range(len(self.urls)):
            stat, samples = self._index(_C, s)
            self.shard_stats.append(stat)
            self.samples += samples
        if not self.samples:
            raise ValueError(f"VideoShards: the shards hold no samples ({self.urls[0] if self.urls else urls!r})")
        self.targets: List[int] = [s[4] for s in self.samples]
        self.classes: List[str] = list(classes) if classes is not None else (
            classes_file(self.urls[0], self.url_pipes[0]) or [str(i) for i in range(max(self.targets) + 1)])

    def _scan(self, _C: Any, path: str) -> Dict[str, Any]:
        exts, label_key, label_field = self._scan_args
        return dict(_C.scan_webdataset_shard(path, image_exts=exts, label_key=label_key,
                                             json_field=label_field, video_members=True))

    def _index(self, _C: Any, s: int) -> Tuple[Optional[Tuple[int, int]], List[Tuple[str, str, int, int, int, str]]]:
        """Shard ``s``'s stamp (a local shard's or a pipe: copy's ``shard_stat``, None for a
        remote one) taken before its index, and its samples."""
        from ..core._shard_index import shard_stat, with_damage

        url, path = self.urls[s], self.shard_paths[s]
        stat = shard_stat(path) if self._remote is None or self._remote.copies[s] is None else None
        index = self._scan(_C, path)
        if index.get("error") and stat is None:  # a remote copy cut short: fetched and indexed again
            again = self._remote.refetch_if_cut(s)  # type: ignore[union-attr]
            if again is not None:
                path = again
                index = self._scan(_C, path)
        index = with_damage(index, url)
        errors = [str(e).replace(path, url) for e in index["errors"]]  # name the URL, not the copy
        return stat, [(url, str(m), int(o), int(n), int(label), e) for m, o, n, label, e in zip(
            index["members"], index["offsets"], index["lengths"], index["labels"], errors)]

    def __setstate__(self, state: Dict[str, Any]) -> None:
        """An unpickled dataset whose pipe: copies are gone (its maker has exited) runs their
        commands again; a stream that no longer gives the samples it gave raises
        ``rl.StaleIndexError`` naming it."""
        self.__dict__.update(state)
        if not missing(self.__dict__.get("_spools")):
            return
        from .. import _C
        from ..core._source import StaleIndexError

        old: PipeSpools = self._spools  # type: ignore[assignment]
        self._spools = PipeSpools(old.folder, old.limit, old.kind)
        for s, pipe in enumerate(self.url_pipes):
            url = self.urls[s]
            if not pipe or self.urls.index(url) != s:
                continue
            self.shard_paths[s] = self._spools.spool(url)
            stat, samples = self._index(_C, s)
            if samples * self.urls.count(url) != [x for x in self.samples if x[0] == url]:
                error = StaleIndexError(
                    f"VideoShards shard {url}: its copy was gone where the dataset was unpickled, "
                    f"and its command, run again, streams other samples than when the dataset was "
                    f"built. Build the VideoShards again (it re-indexes the shard).")
                error.path = url
                raise error
            for t, other in enumerate(self.urls):
                if other == url:
                    self.shard_paths[t], self.shard_stats[t] = self.shard_paths[s], stat

    def __len__(self) -> int:
        return len(self.samples)

    def check_unchanged(self, shards: Optional[List[str]] = None) -> None:
        """Raises ``rl.StaleIndexError`` naming the shard when a shard (of ``shards``, URLs or
        paths as given; default all) is not as it was indexed: a local one whose size or mtime
        differ (``rl.WebDataset``'s rule, ``_shard_index.check_shard``), a remote one whose copy
        is not in the cache as verified by this process and whose object, fetched again, has
        another size or ETag (``rl.WebDataset``'s rule for remote shards). Its members' recorded
        byte ranges would read other bytes. ``rl.DataLoader`` calls it at ``iter()``,
        ``dataset[i]`` for the sample's shard, and the ``VideoFile`` of a sample before it
        decodes. A remote shard that cannot be fetched now is left to its samples (their errors
        name it, under ``on_error``)."""
        for url in self.urls if shards is None else shards:
            try:
                self._check(url)()
            except ConnectionError:
                continue

    def _shard_of(self, shard: str) -> int:
        index = self.__dict__.get("_shards")
        if index is None:
            index = self.__dict__["_shards"] = {url: s for s, url in enumerate(self.urls)}
        return index[shard]

    def _check(self, shard: str) -> Callable[[], None]:
        """The check of :meth:`check_unchanged` for one shard (a remote one that cannot be
        fetched raises ``ConnectionError`` naming it), as a callable that holds no reference to
        the dataset: what a ``VideoFile`` of the shard calls before it decodes."""
        import functools

        s = self._shard_of(shard)
        return functools.partial(_check_unchanged, self.shard_stats[s], shard, self._remote, s,
                                 self.shard_paths[s], self.__dict__.get("_spools"))

    def __getitem__(self, index: int) -> Tuple[Any, Any]:
        from .video import VideoFile

        shard, member, offset, length, target, error = self.samples[index]
        check = self._check(shard)
        check()
        if error:
            raise ValueError(f"VideoShards[{index}]: {error}")
        if self.target_transform is not None:
            target = self.target_transform(target)
        ref = VideoFile(self.shard_paths[self._shard_of(shard)], clip=self.clip, transform=self.transform,
                        byte_range=(offset, length), name=f"{shard}:{member}")
        ref._unchanged = check  # decoded later (kept by the caller): checked again then
        return ref, target

    def __repr__(self) -> str:
        return f"VideoShards({len(self.urls)} shards: {len(self)} videos, clip={self.clip!r})"


def _check_remote(remote: Any, s: int) -> None:
    """Remote shard ``s`` of ``remote`` (``_remote_shards.RemoteShards``) in the cache as it
    was indexed: a copy it verified is read as it is; else it goes through the cache again
    (downloaded or checked), and an object of another size or ETag raises ``StaleIndexError``
    naming the URL (and again at every later check: ``RemoteShards.found_stale``, the rule
    rl.WebDataset shares), one that cannot be fetched ``ConnectionError``."""
    remote.fetch_errors.pop(s, None)
    remote.check([s], background=False)
    error = remote.fetch_errors.get(s)
    if error is not None:
        raise ConnectionError(f"VideoShards shard {remote.urls[s]} could not be downloaded: {error}")


def _check_unchanged(stat: Optional[Tuple[int, int]], shard: str, remote: Any, s: int,
                     path: Optional[str] = None, spools: Any = None) -> None:
    """``VideoShards.check_unchanged`` for one shard: the stamp (``stat``) of a local shard or of
    a ``pipe:`` shard's copy (``path``, the file read), else a remote shard's copy (a shard of a
    dataset with remote ones has a stamp when it is local). ``spools``: the pipe: copies, held
    here so that a VideoFile keeps them as long as it lives."""
    del spools
    from ..core._shard_index import check_shard

    if stat is not None:
        check_shard(shard, stat, "VideoShards", path)
    elif remote is not None:
        _check_remote(remote, s)
