"""Shards in object storage: ``http://``, ``https://`` and ``s3://`` URLs, fetched whole by the
native downloader (libcurl, ``csrc/io/remote.h``) into a node-local cache folder
(``csrc/io/shard_cache.h``), from which the local-shard path reads them.

This module only resolves settings (credentials, region, endpoint, CA bundle, cache folder and
limit) and turns the native results into Python errors; the transfers, retries, locking and
eviction are native and run without the GIL.
"""

from __future__ import annotations

import configparser
import os
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import _C
from . import _schemes
from ._sizes import parse_size

#: URL schemes fetched natively (see :func:`remote_scheme`).
#: Environment variable naming a CA bundle for https (before ``SSL_CERT_FILE``, ``CURL_CA_BUNDLE``).
CA_BUNDLE_ENV = "RINGLOADER_CA_BUNDLE"


def remote_scheme(url: str) -> Optional[str]:
    """``"http"``, ``"https"`` or ``"s3"`` for a URL fetched natively, else None. The one place
    that decides it (the table in ``_schemes``)."""
    scheme = _schemes.remote(url)
    return scheme.name if scheme is not None else None


def default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ringloader", "shards")


def cache_limit_bytes(limit: Any) -> int:
    """Bytes of ``cache_limit=`` (an int or a size like ``"50GB"``); 0 for None (no limit)."""
    if limit is None:
        return 0
    if isinstance(limit, bool):
        raise ValueError(f"WebDataset cache_limit should be bytes or a size like '50GB', got {limit!r}")
    return parse_size(limit, "WebDataset cache_limit")


def _ini(path: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(path, encoding="utf-8")
    except (configparser.Error, UnicodeDecodeError) as why:
        raise ValueError(f"cannot read the AWS settings file {path}: {why}") from None
    return parser


def s3_settings(environ: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """Credentials, region and endpoint for ``s3://`` as the AWS tools find them: the
    environment (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``,
    ``AWS_REGION`` or ``AWS_DEFAULT_REGION``, ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``)
    first, then the profile ``AWS_PROFILE`` (default ``default``) of ``~/.aws/credentials``
    (``AWS_SHARED_CREDENTIALS_FILE``) and ``~/.aws/config`` (``AWS_CONFIG_FILE``: ``region``,
    ``endpoint_url``). Keys are those of ``_C.fetch_shards``' settings; the addressing style is
    :func:`s3_addressing_style`'s."""
    env = os.environ if environ is None else environ
    home = os.path.expanduser("~")
    profile = _profile(env)
    creds_path = env.get("AWS_SHARED_CREDENTIALS_FILE") or os.path.join(home, ".aws", "credentials")
    config_path = env.get("AWS_CONFIG_FILE") or os.path.join(home, ".aws", "config")
    creds = _ini(creds_path)
    config = _ini(config_path)
    section = profile if profile == "default" else f"profile {profile}"
    from_creds = dict(creds[profile]) if creds.has_section(profile) else {}
    from_config = dict(config[section]) if config.has_section(section) else {}

    def pick(env_names: Sequence[str], key: str) -> str:
        for name in env_names:
            if env.get(name):
                return env[name]
        return from_creds.get(key) or from_config.get(key) or ""

    out = {
        "access_key": pick(["AWS_ACCESS_KEY_ID"], "aws_access_key_id"),
        "secret_key": pick(["AWS_SECRET_ACCESS_KEY"], "aws_secret_access_key"),
        "session_token": pick(["AWS_SESSION_TOKEN"], "aws_session_token"),
        "region": pick(["AWS_REGION", "AWS_DEFAULT_REGION"], "region") or "us-east-1",
        "endpoint": pick(["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"], "endpoint_url"),
    }
    return out


def _profile(env: Dict[str, str]) -> str:
    return env.get("AWS_PROFILE") or env.get("AWS_DEFAULT_PROFILE") or "default"


def s3_addressing_style(environ: Optional[Dict[str, str]] = None) -> str:
    """``addressing_style`` in the nested ``s3 =`` block of the profile's section of
    ``~/.aws/config`` (``AWS_CONFIG_FILE``), as botocore reads it; ``auto`` when none."""
    env = os.environ if environ is None else environ
    config_path = env.get("AWS_CONFIG_FILE") or os.path.join(os.path.expanduser("~"), ".aws",
                                                             "config")
    config = _ini(config_path)
    profile = _profile(env)
    section = profile if profile == "default" else f"profile {profile}"
    block = config[section].get("s3", "") if config.has_section(section) else ""
    style = _nested(block, "addressing_style") or "auto"
    if style not in S3_ADDRESSING_STYLES:
        raise ValueError(f"{config_path}: [{section}] s3 addressing_style must be one of "
                         f"{', '.join(S3_ADDRESSING_STYLES)}, got {style!r}")
    return style


#: ``addressing_style`` values, as botocore takes them: ``path`` (``ENDPOINT/bucket/key``),
#: ``virtual`` (``bucket.HOST/key``), ``auto`` (virtual-hosted on AWS's endpoint for a bucket
#: name that is a DNS label, else path-style, which S3-compatible stores expect).
S3_ADDRESSING_STYLES = ("auto", "virtual", "path")


def _nested(block: str, key: str) -> str:
    """``key``'s value in a nested block of an AWS config file (``s3 =`` then indented
    ``key = value`` lines, which configparser keeps as one multi-line value)."""
    for line in block.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip() == key:
            return value.strip()
    return ""


#: Where distributions keep the system's CA bundle (Debian/Ubuntu, Fedora/RHEL, openSUSE,
#: Alpine). A wheel carries the libcurl of the machine it was built on, whose built-in bundle
#: path is that machine's distribution's: on another one it may not exist.
SYSTEM_CA_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt",
                     "/etc/ssl/ca-bundle.pem", "/etc/ssl/cert.pem")


def ca_bundle(ca_file: Optional[str]) -> Optional[str]:
    """The CA bundle https uses: ``ca_file=``, else ``RINGLOADER_CA_BUNDLE``, ``SSL_CERT_FILE``,
    ``CURL_CA_BUNDLE``, else the first of :data:`SYSTEM_CA_BUNDLES` that exists (None: libcurl's
    own default)."""
    for candidate in (ca_file, os.environ.get(CA_BUNDLE_ENV), os.environ.get("SSL_CERT_FILE"),
                      os.environ.get("CURL_CA_BUNDLE")):
        if candidate:
            path = os.fspath(candidate)
            if not os.path.isfile(path):
                raise FileNotFoundError(f"CA bundle {path!r} does not exist")
            return path
    return next((p for p in SYSTEM_CA_BUNDLES if os.path.isfile(p)), None)


#: ``remote_options=`` keys: (type, smallest value; None: one of the values listed for it).
REMOTE_OPTIONS = {"max_connections": (int, 1), "max_attempts": (int, 1),
                  "backoff_initial_s": (float, 0.0), "backoff_max_s": (float, 0.0),
                  "connect_timeout_s": (int, 1), "stall_timeout_s": (int, 1),
                  "min_rate_bytes_per_s": (int, 0), "min_rate_window_s": (float, 0.1),
                  "download_deadline_s": (float, 0.0),
                  "range_reads_below": (float, 0.0), "s3_addressing_style": (str, None)}

#: The default ``range_reads_below``: an epoch's wanted members of a shard not in the cache are
#: fetched by HTTP range requests when that costs less than downloading the shard, by this
#: process's estimate of the link's latency and throughput (``_C.choose_range_reads``).
RANGE_READS_BELOW = "auto"

#: Wanted byte ranges closer than this are fetched by one request (the bytes between included):
#: a few KiB more per request instead of one round trip per neighbouring member.
RANGE_MERGE_GAP = 16 * 1024


def check_remote_options(options: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """``remote_options`` checked: known keys, numbers of the right kind and range."""
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise TypeError(f"WebDataset remote_options must be a dict, got {type(options).__name__}")
    out: Dict[str, Any] = {}
    for key, value in options.items():
        if key not in REMOTE_OPTIONS:
            raise ValueError(f"WebDataset remote_options: unknown key {key!r} (known: "
                             f"{', '.join(REMOTE_OPTIONS)})")
        if key == "range_reads_below" and value == "auto":
            out[key] = value
            continue
        if key == "s3_addressing_style":
            if value not in S3_ADDRESSING_STYLES:
                raise ValueError(f"WebDataset remote_options['s3_addressing_style'] must be one of "
                                 f"{', '.join(S3_ADDRESSING_STYLES)}, got {value!r}")
            out[key] = value
            continue
        kind, least = REMOTE_OPTIONS[key]
        ok = not isinstance(value, bool) and isinstance(value, (int, float) if kind is float
                                                        else int)
        if not ok or value < least:
            also = " or 'auto'" if key == "range_reads_below" else ""
            raise ValueError(f"WebDataset remote_options[{key!r}] must be "
                             f"{'a number' if kind is float else 'an int'} >= {least}{also}, "
                             f"got {value!r}")
        out[key] = kind(value)
    return out


class RemoteFetcher:
    """Fetches a dataset's remote shards into its cache folder (settings resolved once)."""

    def __init__(self, cache_dir: Optional[str], cache_limit: Any, ca_file: Optional[str],
                 settings: Optional[Dict[str, Any]] = None):
        self.cache_dir = os.path.abspath(os.fspath(cache_dir)) if cache_dir is not None \
            else default_cache_dir()
        self.cache_limit = cache_limit_bytes(cache_limit)
        self.settings: Dict[str, Any] = {}
        self.ca_file = ca_bundle(ca_file)
        if self.ca_file is not None:
            self.settings["ca_file"] = self.ca_file
        self.settings.update(check_remote_options(settings))
        #: Range reads for an epoch that wants under this fraction of a shard's bytes (0: never),
        #: or "auto": when they cost less than the whole shard on the link as measured.
        below = self.settings.pop("range_reads_below", RANGE_READS_BELOW)
        self.range_reads_below: Any = below if below == "auto" else float(below)
        self._s3_resolved = False

    def _prepare(self, urls: Sequence[str]) -> None:
        self._resolve(urls)
        os.makedirs(self.cache_dir, exist_ok=True)

    def _resolve(self, urls: Sequence[str]) -> None:
        """The s3 settings (credentials, region, endpoint), once, when ``urls`` need them."""
        if not self._s3_resolved and any(remote_scheme(u) == "s3" for u in urls):
            for key, value in s3_settings().items():
                self.settings.setdefault(key, value)
            if "s3_addressing_style" not in self.settings:
                self.settings["s3_addressing_style"] = s3_addressing_style()
            self._s3_resolved = True

    def start(self, urls: Sequence[str],
              expected: Sequence[Tuple[int, Optional[str]]]) -> "_C.BackgroundFetch":
        """Starts downloading ``urls`` on a native thread, in this order (``max_connections``
        at a time); the loader's reads of their cache entries wait for each to land, or fail
        with its error. ``expected``: per URL, the (size, ETag or None) it was indexed from; a
        copy that differs fails its samples as a stale index."""
        self._prepare(urls)
        return _C.BackgroundFetch(list(urls), self.cache_dir, self.cache_limit, self.settings,
                                  [(int(size), etag) for size, etag in expected])

    def fetch(self, urls: Sequence[str]) -> List[Dict[str, Any]]:
        """One native result per URL: ``{path, size, etag, downloaded, attempts}`` or
        ``{error, code}``."""
        self._prepare(urls)
        return self._cancellable(lambda cancel: _C.fetch_shards(
            list(urls), self.cache_dir, self.cache_limit, self.settings, cancel))

    def refetch_if_cut(self, url: str) -> Optional[Dict[str, Any]]:
        """For a shard whose cached copy indexes as damaged: when the server's object is not
        that copy (another size, e.g. a download the server cut short and said so, or another
        ETag), the copy is dropped and downloaded again: its ``fetch`` result. None when the
        server agrees with the copy (the object itself is damaged) or could not tell."""
        self._prepare([url])
        if not self._cancellable(lambda cancel: [_C.shard_cache_revalidate(
                url, self.cache_dir, self.settings, cancel)])[0]:
            return None
        got = self.fetch([url])[0]
        return None if "error" in got else got

    @property
    def range_reads(self) -> bool:
        """Whether an epoch may read members by range at all (``range_reads_below`` not 0)."""
        return self.range_reads_below == "auto" or self.range_reads_below > 0

    def by_range(self, url: str, size: int, offsets: Any, lengths: Any) -> bool:
        """Whether an epoch that wants these members (byte ranges) of the remote shard ``url``
        (``size`` bytes, not in the cache) reads them by range instead of downloading it."""
        wanted = int(np.sum(np.asarray(lengths, dtype=np.int64)))
        if size <= 0 or wanted >= size:
            return False
        if self.range_reads_below != "auto":
            return wanted < self.range_reads_below * size
        self._resolve([url])  # an s3:// URL's host is its endpoint's
        choice = _C.choose_range_reads(url, int(size),
                                       np.asarray(offsets, dtype=np.int64).tolist(),
                                       np.asarray(lengths, dtype=np.int64).tolist(),
                                       RANGE_MERGE_GAP, self.settings)
        return bool(choice["by_range"])

    def start_ranges(self, copies: Sequence[Tuple[str, str, int, Optional[str], Sequence[int],
                                                  Sequence[int], str]]) -> "_C.BackgroundRanges":
        """Per (url, copy path, size, ETag or None, offsets, lengths, cache entry): those byte
        ranges of the object (of that size and ETag, None: not checked) into a sparse copy, by
        HTTP range requests on a native thread while the epoch reads, the copies in this order
        and ``max_connections`` requests at once. A read of a copy's cache entry waits for its
        ranges to land, or fails with their error (a changed object: a stale index)."""
        self._prepare([c[0] for c in copies])
        wanted = [(url, path, int(size), etag or "", [int(o) for o in offsets],
                   [int(n) for n in lengths], entry)
                  for url, path, size, etag, offsets, lengths, entry in copies]
        return _C.BackgroundRanges(wanted, RANGE_MERGE_GAP, self.settings)

    def link_estimate(self, url: str) -> Dict[str, Any]:
        """This process's estimate of the link to ``url``'s host (see ``_C.link_estimate``)."""
        self._resolve([url])
        return _C.link_estimate(url, self.settings)

    def _cancellable(self, call: Any) -> List[Any]:
        # The native call runs in a helper thread so that Ctrl-C reaches this one: it stops the
        # transfers (within ~0.1 s) and is raised once they are closed.
        cancel = _C.FetchCancel()
        out: List[Any] = []
        failure: List[BaseException] = []

        done = threading.Event()

        def run() -> None:
            try:
                out.extend(call(cancel))
            except BaseException as why:  # noqa: BLE001 - handed to the caller's thread
                failure.append(why)
            finally:
                done.set()

        # Waits on an Event, not Thread.join: a join interrupted by Ctrl-C can return at once
        # the next time (CPython), which would leave the transfers running.
        threading.Thread(target=run, name="ringloader-fetch", daemon=True).start()
        try:
            while not done.wait(0.1):
                pass
        except BaseException:
            cancel.set()
            done.wait()
            raise
        if failure:
            raise failure[0]
        return out


#: Native codes that mean the URL is wrong, not that the network failed: raised at once.
_FATAL = {"not_found": FileNotFoundError, "permission_denied": PermissionError,
          "invalid_argument": ValueError, "failed_precondition": RuntimeError}


def raise_if_fatal(result: Dict[str, Any], what: str = "WebDataset shard") -> None:
    """Raises the Python error of a result whose failure is not worth retrying later (a 404, a
    403, a bad URL, a TLS certificate refused), its message ``what: error``; transient failures
    are left to the caller."""
    kind = _FATAL.get(result.get("code", ""))
    if kind is not None:
        raise kind(f"{what}: {result['error']}")
