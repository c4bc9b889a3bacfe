"""A throwaway PostgreSQL server for tests and benchmarks: the real server from the
Debian packages (``apt-get install postgresql``), in a temporary directory, on its own
port, gone when stopped. PostgreSQL refuses to run as root, so as root it runs as the
``postgres`` user. No mocks: the stores are tested against the real engine."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

REQUIRE_ENV = "REQUIRE_POSTGRES_FOR_TESTS"  # CI sets it: a missing server fails, never skips


def find_bin_dir() -> Path | None:
    """Where ``initdb`` and ``pg_ctl`` are: $PG_BIN, PATH, or the newest Debian version."""
    explicit = os.environ.get("PG_BIN")
    if explicit and (Path(explicit) / "initdb").is_file():
        return Path(explicit)
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).parent
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PostgresServer:
    """``start()`` → initdb + pg_ctl start in a temp dir; ``dsn(db)``; ``stop()``.
    ``fsync=False`` is for tests (the server itself is never killed there); benchmarks
    keep the default, durable, setting."""

    def __init__(self, *, fsync: bool = True, base_dir: str | None = None) -> None:
        bin_dir = find_bin_dir()
        if bin_dir is None:
            raise RuntimeError("PostgreSQL server binaries not found: apt-get install postgresql")
        self.bin_dir = bin_dir
        self.fsync = fsync
        self.port = _free_port()
        self.root = Path(tempfile.mkdtemp(prefix="netclaw-pg-", dir=base_dir))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self._as_root = os.geteuid() == 0
        self.running = False

    def _run(self, *args: str) -> None:
        command = [str(self.bin_dir / args[0]), *args[1:]]
        if self._as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"{args[0]} failed ({result.returncode}): {result.stderr or result.stdout}")

    def start(self) -> PostgresServer:
        if self._as_root:
            self.root.chmod(0o755)
            shutil.chown(self.root, "postgres", "postgres")
        if not self.data.exists():
            self._run(
                "initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"
            )
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c max_connections=200"
        if not self.fsync:
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", "60", "start"
        )
        self.running = True
        return self

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (the data stays until :meth:`remove`)."""
        if self.running:
            self.running = False
            self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def remove(self) -> None:
        with contextlib.suppress(RuntimeError):
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, prefix: str = "netclaw") -> str:
        """A new empty database; returns its DSN."""
        import psycopg

        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.dsn(name)

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.remove()


def server_for_tests() -> Iterator[PostgresServer]:
    """A started server (fsync off) for a fixture to yield; removed after. Skips (with the
    reason) where PostgreSQL is not installed, unless CI asks for it to be required."""
    import pytest

    if find_bin_dir() is None:
        if os.environ.get(REQUIRE_ENV):
            pytest.fail("PostgreSQL is required here but not installed: apt-get install postgresql")
        pytest.skip("PostgreSQL server binaries not found (apt-get install postgresql)")
    with postgres_server(fsync=False) as server:
        yield server


@contextlib.contextmanager
def postgres_server(*, fsync: bool = True) -> Iterator[PostgresServer]:
    server = PostgresServer(fsync=fsync)
    try:
        yield server.start()
    finally:
        server.remove()
