"""A private S3-compatible server for tests and benchmarks: s3proxy (Maven Central,
``make jars`` puts it in .jars/s3proxy) with its filesystem backend on loopback.

Each bucket is a directory of the data dir. The server checks SigV4 signatures
against its own key pair, made up per instance, and enforces ``If-None-Match: *``
atomically, as delta-rs's commits need. ``NoConditionalPut`` is the opposite: a
store that ignores conditional puts, for the start-up check's negative case.
"""

from __future__ import annotations

import http.client
import os
import secrets
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from devtools.mariadb import free_port

REPO = Path(__file__).resolve().parent.parent
S3PROXY_JARS = REPO / ".jars" / "s3proxy"
REGION = "us-east-1"


class S3Proxy:
    """``start()`` runs the server, ``stop()`` kills it. Several instances may share
    ``data_dir`` (the same buckets through two servers)."""

    def __init__(
        self,
        base_dir: Path,
        *,
        data_dir: Path | None = None,
        authorization: bool = True,
        port: int | None = None,
    ) -> None:
        self.base_dir = Path(base_dir)
        self.data_dir = Path(data_dir or self.base_dir / "data")
        self.authorization = authorization
        self.port = port or free_port()
        self.access_key = f"walsink{secrets.token_hex(4)}"
        self.secret_key = f"wal-sink-test-secret-{secrets.token_hex(12)}"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def credentials(self) -> dict[str, str]:
        """The environment a client needs (the standard AWS variables)."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
        }

    def storage_toml(self) -> str:
        """The sink config's ``[storage]`` section for this server."""
        return (
            f'[storage]\nendpoint = "{self.endpoint}"\nregion = "{REGION}"\n'
            "path_style = true\n"
        )

    def create_bucket(self, name: str) -> str:
        """A bucket is a directory of the filesystem backend; returns ``s3a://name``."""
        (self.data_dir / name).mkdir(parents=True, exist_ok=True)
        return f"s3a://{name}"

    def start(self, timeout: float = 60.0) -> None:
        jars = sorted(S3PROXY_JARS.glob("s3proxy-*-jar-with-dependencies.jar"))
        if not jars:
            raise RuntimeError(f"no s3proxy jar in {S3PROXY_JARS}: run `make jars`")
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        lines = [
            f"s3proxy.endpoint={self.endpoint}",
            "jclouds.provider=filesystem",
            f"jclouds.filesystem.basedir={self.data_dir}",
        ]
        if self.authorization:
            lines += [
                "s3proxy.authorization=aws-v2-or-v4",
                f"s3proxy.identity={self.access_key}",
                f"s3proxy.credential={self.secret_key}",
            ]
        else:
            lines.append("s3proxy.authorization=none")
        props = self.base_dir / f"s3proxy-{self.port}.properties"
        props.write_text("\n".join(lines) + "\n")
        log = open(self.base_dir / f"s3proxy-{self.port}.log", "ab")
        self.process = subprocess.Popen(
            ["java", "-Xmx384m", "-jar", str(jars[-1]), "--properties", str(props)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "LOG_LEVEL": "warn"},
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"s3proxy did not start; see {log.name}")
            time.sleep(0.1)

    def _answers(self) -> bool:
        """Any HTTP status means the server is up (403 without credentials)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
        try:
            conn.request("GET", "/")
            conn.getresponse().read()
            return True
        except OSError:
            return False
        finally:
            conn.close()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


HOP_HEADERS = frozenset(
    {"connection", "keep-alive", "proxy-connection", "te", "trailer", "upgrade"}
)
CONDITIONS = frozenset({"if-none-match", "if-match"})


class NoConditionalPut:
    """A store that ignores conditional puts: a reverse proxy on loopback that drops
    ``If-None-Match`` / ``If-Match`` from writes and forwards everything else.

    SigV4 signs those headers, so the upstream must not check signatures: an
    ``S3Proxy(authorization=False)`` on the same data dir as the real one.
    """

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        handler = type("Handler", (_StripHandler,), {"upstream_port": upstream_port})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.stripped = 0
        handler.proxy = self
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _StripHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    upstream_port: int
    proxy: NoConditionalPut

    def log_message(self, *args: object) -> None:
        pass

    def _forward(self) -> None:
        headers = [
            (k, v)
            for k, v in self.headers.items()
            if k.lower() not in HOP_HEADERS and k.lower() != "transfer-encoding"
        ]
        if self.command in ("PUT", "POST"):
            kept = [(k, v) for k, v in headers if k.lower() not in CONDITIONS]
            if len(kept) != len(headers):
                self.proxy.stripped += 1
            headers = kept
        body = self._body()
        conn = http.client.HTTPConnection("127.0.0.1", self.upstream_port, timeout=120)
        try:
            conn.putrequest(
                self.command, self.path, skip_host=True, skip_accept_encoding=True
            )
            for k, v in headers:
                if k.lower() != "content-length":
                    conn.putheader(k, v)
            if body or self.command in ("PUT", "POST"):
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        self.send_response_only(resp.status, resp.reason)
        head = self.command == "HEAD"  # its Content-Length is the object's size
        for k, v in resp.getheaders():
            if k.lower() not in HOP_HEADERS | {"transfer-encoding"} and (
                head or k.lower() != "content-length"
            ):
                self.send_header(k, v)
        if not head:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if not head:
            self.wfile.write(data)

    def _body(self) -> bytes:
        """The request body, de-chunked (bodies here are small commit files)."""
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward
