"""Loopback servers for the remote-shard tests, started and stopped by them: nginx (HTTP and
HTTPS with a certificate made at test time), moto's standalone S3 server (also with request
signatures checked: MotoAuth), and a small proxy that injects faults (latency, 503s, connections
reset mid-body, stalls, trickles, objects without ETag replaced mid-download) and records what it
was asked."""

from __future__ import annotations

import email.utils
import http.client
import io
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tarfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Dict, List, Optional

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
OPENSSL = shutil.which("openssl")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tar_bytes(members) -> bytes:
    """A USTAR archive of (name, bytes) members, in order: a shard for a test server to serve."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def proxy_of_two_shards(samples, hold_s: float) -> "FaultProxy":
    """A FaultProxy serving `/train-0.tar` and `/train-1.tar` (no upstream): the first four and
    the next four of `samples` ((path, label) pairs) as jpg + cls members."""
    proxy = FaultProxy("http://127.0.0.1:9")
    proxy.hold_s = hold_s
    for i, part in enumerate((samples[:4], samples[4:8])):
        data = tar_bytes([(f"s{j:03d}.{ext}", body) for j, (path, label) in enumerate(part)
                          for ext, body in (("jpg", Path(path).read_bytes()),
                                            ("cls", str(label).encode()))])
        proxy.serve(f"/train-{i}.tar", MemoryObject([data]))
    return proxy


def wait_for_port(port: int, proc: Optional[subprocess.Popen] = None, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with status {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port} after {timeout} s")


def make_cert(folder: Path) -> tuple:
    """A self-signed certificate for 127.0.0.1 (cert, key)."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run([OPENSSL, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    return cert, key


class Nginx:
    """nginx serving `root` on a free loopback port, HTTP and (with `cert`) HTTPS, as this user
    with its own prefix; `/forbidden/` answers 403. Range requests are nginx's own."""

    def __init__(self, root: Path, prefix: Path, cert: Optional[Path] = None,
                 key: Optional[Path] = None):
        self.root, self.prefix = Path(root), Path(prefix)
        self.port = free_port()
        self.https_port = free_port() if cert else None
        self.prefix.mkdir(parents=True, exist_ok=True)
        (self.prefix / "logs").mkdir(exist_ok=True)
        user = "user root;\n" if os.geteuid() == 0 else ""
        tls = ""
        if cert:
            tls = (f"server {{ listen 127.0.0.1:{self.https_port} ssl; ssl_certificate {cert}; "
                   f"ssl_certificate_key {key}; root {self.root}; "
                   f"location /forbidden/ {{ return 403; }} }}\n")
        temp = self.prefix / "tmp"
        temp.mkdir(exist_ok=True)
        conf = (f"{user}worker_processes 1; pid {self.prefix}/nginx.pid; "
                f"error_log {self.prefix}/logs/error.log;\n"
                f"events {{ worker_connections 64; }}\n"
                f"http {{ access_log {self.prefix}/logs/access.log; "
                f"client_body_temp_path {temp}/body; proxy_temp_path {temp}/proxy; "
                f"fastcgi_temp_path {temp}/fcgi; uwsgi_temp_path {temp}/uwsgi; "
                f"scgi_temp_path {temp}/scgi;\n"
                f"server {{ listen 127.0.0.1:{self.port}; root {self.root}; "
                f"location /forbidden/ {{ return 403; }} }}\n{tls}}}\n")
        (self.prefix / "nginx.conf").write_text(conf)
        self.proc = subprocess.Popen(
            [NGINX, "-p", str(self.prefix), "-c", str(self.prefix / "nginx.conf"),
             "-e", str(self.prefix / "logs" / "error.log"), "-g", "daemon off;"], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        try:
            wait_for_port(self.port, self.proc)
            if self.https_port:
                wait_for_port(self.https_port, self.proc)
        except Exception as why:
            self.stop()
            log = self.prefix / "logs" / "error.log"
            raise RuntimeError(f"nginx did not start: {why}: "
                               f"{log.read_text() if log.exists() else ''}") from None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def https_url(self) -> str:
        return f"https://127.0.0.1:{self.https_port}"

    def gets(self, name: str) -> int:
        """GET requests for paths ending in `name` so far (the access log)."""
        log = self.prefix / "logs" / "access.log"
        if not log.exists():
            return 0
        return sum(1 for line in log.read_text().splitlines()
                   if "GET /" in line and f"/{name} HTTP" in line)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Moto:
    """moto's standalone S3 server on a free loopback port."""

    def __init__(self):
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for_port(self.port, self.proc, timeout=60)
        except Exception:
            self.stop()
            raise

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def put(self, bucket: str, files: Dict[str, bytes]) -> None:
        import boto3

        s3 = boto3.client("s3", endpoint_url=self.url, region_name="us-east-1",
                          aws_access_key_id="test", aws_secret_access_key="test")
        s3.create_bucket(Bucket=bucket)
        for key, data in files.items():
            s3.put_object(Bucket=bucket, Key=key, Body=data)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class FaultProxy:
    """An HTTP proxy to `upstream` (http://host:port) that applies, per request, the next fault
    queued for its path (`faults[path]`: "503", "late503" (a 503 after half a second: the
    other requests of the download are answered first), "403" (with S3's XML body), "reset"
    (half the body, then a TCP reset),
    "stall" (half the body, then silence for `stall_s`), "short" (half the body, and a
    Content-Length that says so: a server that truncates), "norange" (the whole object whatever
    Range asked, as a server without range support answers), "trickle" (the body at
    `trickle_bytes_per_s`, until the client hangs up or `hold_s` passes), or "ok"), and
    `latency_s` before each response; a path given to serve() is answered from a MemoryObject
    instead of `upstream`; a path given to hold() is answered only once released. Every request's path and headers are kept in `requests`;
    `peak_in_flight` is the most requests it answered at once. (The throttled link of
    the benchmark is ringloader.bench's own server.)"""

    def __init__(self, upstream: str, latency_s: float = 0.0, stall_s: float = 5.0):
        self.upstream = upstream.split("://", 1)[1]
        self.latency_s, self.stall_s = latency_s, stall_s
        self.faults: Dict[str, List[str]] = {}
        self.always: Dict[str, str] = {}
        #: Paths whose responses wait until release(path) (or `hold_s`, so a test never hangs).
        self.held: Dict[str, threading.Event] = {}
        self.hold_s = 30.0
        self.trickle_bytes_per_s = 16.0
        #: Send upstream the Host the client sent (a SigV4 signature covers it), not upstream's.
        self.forward_host = False
        #: Paths answered from memory (serve()) instead of upstream.
        self.objects: Dict[str, "MemoryObject"] = {}
        #: Called (with the path) after a "reset": what changes on the server between attempts.
        self.after_reset = None
        self.requests: List[Dict[str, str]] = []
        #: Requests being answered now, and the most that ever were at once.
        self.in_flight = self.peak_in_flight = 0
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                proxy._serve(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def gets(self, path: str) -> List[Dict[str, str]]:
        with self.lock:
            return [r for r in self.requests if r["path"] == path]

    def hold(self, path: str) -> None:
        """Requests for `path` get no answer until release(path)."""
        self.held[path] = threading.Event()

    def release(self, path: str) -> None:
        self.held.pop(path).set()

    def serve(self, path: str, obj: "MemoryObject") -> "MemoryObject":
        """Requests for `path` are answered from `obj` (faults still apply)."""
        self.objects[path] = obj
        return obj

    def _next_fault(self, path: str) -> str:
        with self.lock:
            queue = self.faults.get(path)
            if queue:
                return queue.pop(0)
            return self.always.get(path, "ok")

    def _serve(self, h: BaseHTTPRequestHandler) -> None:
        with self.lock:
            self.requests.append(dict({k.lower(): v for k, v in h.headers.items()}, path=h.path))
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            self._answer(h)
        finally:
            with self.lock:
                self.in_flight -= 1

    def _answer(self, h: BaseHTTPRequestHandler) -> None:
        fault = self._next_fault(h.path)
        held = self.held.get(h.path)
        if held is not None:
            held.wait(self.hold_s)
        if self.latency_s:
            time.sleep(self.latency_s)
        if fault == "late503":
            time.sleep(0.5)
            fault = "503"
        if fault in ("503", "403"):
            body = b"slow down" if fault == "503" else (
                b"<?xml version='1.0' encoding='UTF-8'?>\n<Error><Code>AccessDenied</Code>"
                b"<Message>Access Denied</Message></Error>")
            h.send_response(int(fault))
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)
            return
        obj = self.objects.get(h.path)
        if obj is not None:
            with self.lock:
                status, answer, body = obj.answer(h.headers)
            resp_headers = list(answer.items())
        else:
            conn = http.client.HTTPConnection(self.upstream, timeout=30)
            dropped = ("connection",) + (() if self.forward_host else ("host",)) + \
                (("range", "if-range") if fault == "norange" else ())
            headers = {k: v for k, v in h.headers.items() if k.lower() not in dropped}
            conn.request("GET", h.path, headers=headers)
            resp = conn.getresponse()
            body = resp.read()
            conn.close()
            status, resp_headers = resp.status, resp.getheaders()
        if fault == "short":
            body = body[:len(body) // 2]
        h.send_response(status)
        for k, v in resp_headers:
            if k.lower() not in ("connection", "transfer-encoding", "content-length", "server",
                                 "date", "keep-alive"):
                h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if fault == "trickle":
            deadline = time.monotonic() + self.hold_s
            try:
                for i in range(len(body)):
                    if time.monotonic() > deadline:
                        break
                    h.wfile.write(body[i:i + 1])
                    h.wfile.flush()
                    time.sleep(1.0 / self.trickle_bytes_per_s)
            except OSError:
                pass  # the client gave up: what the test wants
            h.close_connection = True
            return
        if fault in ("reset", "stall") and len(body) > 1:
            h.wfile.write(body[:len(body) // 2])
            h.wfile.flush()
            if fault == "stall":
                time.sleep(self.stall_s)
            # RST, not FIN: SO_LINGER with a zero timeout.
            h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            h.connection.close()
            h.close_connection = True
            if fault == "reset" and self.after_reset is not None:
                self.after_reset(h.path)
            return
        h.wfile.write(body)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class MotoAuth(Moto):
    """moto's S3 server that checks every request's SigV4 signature and IAM permissions, as S3
    does. The buckets and the credentials are made before the checks start (moto's
    ``/moto-api/reset-auth``, the server form of ``INITIAL_NO_AUTH_ACTION_COUNT``): an IAM user
    whose long-term key may read every bucket (`access_key`, `secret_key`), and a role with the
    same rights whose temporary credentials, from moto's STS, sign with a session token
    (`session`: access_key, secret_key, session_token)."""

    def __init__(self, buckets: Dict[str, Dict[str, bytes]]):
        super().__init__()
        try:
            self._setup(buckets)
        except Exception:
            self.stop()
            raise

    def _client(self, service: str, key: str = "setup", secret: str = "setup",
                token: Optional[str] = None, region: str = "us-east-1"):
        import boto3

        return boto3.client(service, endpoint_url=self.url, region_name=region,
                            aws_access_key_id=key, aws_secret_access_key=secret,
                            aws_session_token=token)

    def _setup(self, buckets: Dict[str, Dict[str, bytes]]) -> None:
        for bucket, files in buckets.items():
            self.put(bucket, files)
        read = json.dumps({"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]})
        iam = self._client("iam")
        iam.create_user(UserName="reader")
        iam.put_user_policy(UserName="reader", PolicyName="read", PolicyDocument=read)
        key = iam.create_access_key(UserName="reader")["AccessKey"]
        self.access_key, self.secret_key = key["AccessKeyId"], key["SecretAccessKey"]
        trust = json.dumps({"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}]})
        role = iam.create_role(RoleName="reader-role", AssumeRolePolicyDocument=trust)["Role"]
        iam.put_role_policy(RoleName="reader-role", PolicyName="read", PolicyDocument=read)
        creds = self._client("sts").assume_role(RoleArn=role["Arn"],
                                                RoleSessionName="train")["Credentials"]
        self.session = {"access_key": creds["AccessKeyId"], "secret_key": creds["SecretAccessKey"],
                        "session_token": creds["SessionToken"]}
        # From here on every request's signature is checked.
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        conn.request("POST", "/moto-api/reset-auth", body=b"0")
        resp = conn.getresponse()
        resp.read()
        conn.close()
        if resp.status != 200:
            raise RuntimeError(f"moto did not turn authentication on: HTTP {resp.status}")

    def boto3_get(self, bucket: str, key: str, region: str = "us-east-1", **creds) -> bytes:
        """The object as boto3 fetches it, signed with `creds` (access_key, secret_key,
        session_token; default: the long-term key) for `region`."""
        s3 = self._client("s3", creds.get("access_key", self.access_key),
                          creds.get("secret_key", self.secret_key), creds.get("session_token"),
                          region)
        return s3.get_object(Bucket=bucket, Key=key)["Body"].read()


class MemoryObject:
    """An object that FaultProxy answers itself (FaultProxy.serve): Range, If-Range, If-Match
    and If-Unmodified-Since as a server answers them (the last two only when `preconditions`),
    an ETag only when `etag`, and a Last-Modified per version, each a minute after the one
    before. With `replace_after_first_range`, the next version takes over the moment the first
    range request has been answered (a same-size object replaced during a download)."""

    def __init__(self, versions: List[bytes], etag: bool = False, preconditions: bool = True,
                 replace_after_first_range: bool = False):
        self.versions, self.current = list(versions), 0
        self.with_etag, self.preconditions = etag, preconditions
        self.replace_after_first_range = replace_after_first_range
        #: (status, version) of every request answered.
        self.answered: List[tuple] = []

    def etag(self, version: int) -> str:
        return f'"v{version}-{len(self.versions[version])}"'

    def last_modified(self, version: int) -> str:
        return email.utils.formatdate(1_700_000_000 + 60 * version, usegmt=True)

    def answer(self, headers) -> tuple:
        """(status, headers, body) for a GET with these request headers (FaultProxy calls it
        under its lock, so the version a request sees is decided atomically)."""
        v = self.current
        data = self.versions[v]
        out = {"Last-Modified": self.last_modified(v), "Accept-Ranges": "bytes"}
        if self.with_etag:
            out["ETag"] = self.etag(v)

        def when(text: str) -> float:
            return email.utils.parsedate_to_datetime(text).timestamp()

        if self.preconditions:
            match, since = headers.get("If-Match"), headers.get("If-Unmodified-Since")
            if (match is not None and match != out.get("ETag")) or \
                    (since is not None and when(out["Last-Modified"]) > when(since)):
                self.answered.append((412, v))
                return 412, out, b""
        rng, if_range = headers.get("Range"), headers.get("If-Range")
        if rng and if_range is not None and if_range not in (out.get("ETag"), out["Last-Modified"]):
            rng = None  # changed since: the whole object
        if rng and rng.startswith("bytes="):
            first, _, last = rng[len("bytes="):].partition("-")
            start = int(first)
            end = min(int(last) if last else len(data) - 1, len(data) - 1)
            out["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
            self.answered.append((206, v))
            if self.replace_after_first_range and self.current + 1 < len(self.versions):
                self.current += 1
                self.replace_after_first_range = False
            return 206, out, data[start:end + 1]
        self.answered.append((200, v))
        return 200, out, data
