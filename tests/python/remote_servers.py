"""Loopback servers for the remote-shard tests, started and stopped by them: nginx (HTTP and
HTTPS with a certificate made at test time), moto's standalone S3 server, and a small proxy that
injects faults (latency, 503s, connections reset mid-body, stalls) and records what it was
asked."""

from __future__ import annotations

import http.client
import os
import shutil
import socket
import struct
import subprocess
import sys
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
    queued for its path (`faults[path]`: "503", "403" (with S3's XML body), "reset" (half the body, then a TCP reset),
    "stall" (half the body, then silence for `stall_s`), "short" (half the body, and a
    Content-Length that says so: a server that truncates), "norange" (the whole object whatever
    Range asked, as a server without range support answers), or "ok"), and `latency_s` before each
    response; a path given to hold() is answered only once released. Every request's path and headers are kept in `requests`;
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
        if fault in ("503", "403"):
            body = b"slow down" if fault == "503" else (
                b"<?xml version='1.0' encoding='UTF-8'?>\n<Error><Code>AccessDenied</Code>"
                b"<Message>Access Denied</Message></Error>")
            h.send_response(int(fault))
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)
            return
        conn = http.client.HTTPConnection(self.upstream, timeout=30)
        dropped = ("host", "connection") + (("range", "if-range") if fault == "norange" else ())
        headers = {k: v for k, v in h.headers.items() if k.lower() not in dropped}
        conn.request("GET", h.path, headers=headers)
        resp = conn.getresponse()
        body = resp.read()
        conn.close()
        if fault == "short":
            body = body[:len(body) // 2]
        h.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("connection", "transfer-encoding", "content-length", "server",
                                 "date", "keep-alive"):
                h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
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
