"""A private MariaDB server for tests and the demo: own datadir, own port, own socket,
no system service. Debian's mariadb-server provides the binaries (``make mariadb``)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pymysql

SINK_USER = "sink"
SINK_PASSWORD = "sink-test-password"


def _binary(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin")
    if not found:
        raise RuntimeError(
            f"{name} not found: run `make mariadb` (Debian mariadb-server)"
        )
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MariaDB:
    """Start with ``start()``; ``stop()`` kills it. Root is reachable on the socket."""

    def __init__(self, base_dir: Path, port: int | None = None) -> None:
        self.base_dir = Path(base_dir)
        self.datadir = self.base_dir / "data"
        self.socket = self.base_dir / "mysqld.sock"
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> None:
        # Its own tmpdir: two servers set up at once (one per test worker) shared
        # /tmp, and a bootstrap failed on the other's temporary table file
        # ("Could not remove temporary table '/tmp/#sql-temptable-…'").
        tmpdir = self.base_dir / "tmp"
        tmpdir.mkdir(parents=True, exist_ok=True)
        if not self.datadir.exists():
            done = subprocess.run(
                [
                    _binary("mariadb-install-db"),
                    "--no-defaults",
                    f"--datadir={self.datadir}",
                    f"--tmpdir={tmpdir}",
                    "--user=root" if os.geteuid() == 0 else f"--user={os.getlogin()}",
                    "--auth-root-authentication-method=normal",
                    "--skip-test-db",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
            )
            if done.returncode != 0:
                raise RuntimeError(
                    f"mariadb-install-db failed ({done.returncode}):\n"
                    + done.stdout[-2000:]
                )
        args = [
            _binary("mariadbd"),
            "--no-defaults",
            f"--datadir={self.datadir}",
            f"--tmpdir={tmpdir}",
            f"--socket={self.socket}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            f"--pid-file={self.base_dir / 'mysqld.pid'}",
            f"--log-error={self.base_dir / 'error.log'}",
            "--skip-name-resolve",
            "--innodb-buffer-pool-size=256M",
            "--max-connections=200",
            "--innodb-flush-log-at-trx-commit=1",
            "--local-infile=1",
        ]
        if os.geteuid() == 0:
            args.append("--user=root")
        self.process = subprocess.Popen(
            args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.root().close()
                break
            except pymysql.err.OperationalError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    log = (self.base_dir / "error.log").read_text(errors="replace")[
                        -2000:
                    ]
                    raise RuntimeError(f"MariaDB did not start:\n{log}") from None
                time.sleep(0.2)
        with self.root() as conn, conn.cursor() as cur:
            cur.execute(
                f"CREATE USER IF NOT EXISTS '{SINK_USER}'@'127.0.0.1' "
                f"IDENTIFIED BY '{SINK_PASSWORD}'"
            )
            cur.execute(f"GRANT ALL ON *.* TO '{SINK_USER}'@'127.0.0.1'")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def root(self, database: str | None = None) -> pymysql.connections.Connection:
        return pymysql.connect(
            unix_socket=str(self.socket),
            user="root",
            database=database,
            autocommit=True,
        )

    def create_database(self, name: str) -> None:
        with self.root() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
            cur.execute(f"CREATE DATABASE `{name}`")

    def sink_url(self, database: str) -> str:
        """SQLAlchemy URL for the sink user, without the password (as in config)."""
        return f"mysql+pymysql://{SINK_USER}@127.0.0.1:{self.port}/{database}"
