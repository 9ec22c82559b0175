"""A throw-away PostgreSQL server for the tests, from the machine's own PostgreSQL package (Debian's
``postgresql``: ``initdb``, ``pg_ctl``): a cluster in a temporary folder, listening on a free
loopback port and on a Unix socket in that folder, with password (SCRAM) authentication for
one user, so a wrong password is refused as on a real server.

PostgreSQL refuses to run as root: under root (CI) the cluster is made and run by the system's
``postgres`` user (or ``nobody``), through ``runuser``; under any other user, by that user.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

USER, PASSWORD, DATABASE = "pawn", "pawn-test-secret", "pawn"


def pg_bin_dir() -> Optional[Path]:
    """The folder of ``initdb`` and ``pg_ctl``: the one on ``PATH``, else the newest
    ``/usr/lib/postgresql/<version>/bin`` (Debian puts them there, off ``PATH``); None if absent."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(os.path.realpath(found)).parent
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(d.split("/")[-2]) if d.split("/")[-2].isdigit() else 0)
    for d in reversed(dirs):
        if (Path(d) / "initdb").is_file() and (Path(d) / "pg_ctl").is_file():
            return Path(d)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class PostgresServer:
    """One running cluster. ``url``: the SQLAlchemy URL of its database (user, password,
    127.0.0.1 and the port); :meth:`stop` / :meth:`start` restart it on the same port."""

    bin_dir: Path
    home: Path
    port: int
    run_as: Optional[str]

    @property
    def data(self) -> Path:
        return self.home / "data"

    def url(self, password: str = PASSWORD, database: str = DATABASE, port: Optional[int] = None) -> str:
        return f"postgresql+psycopg2://{USER}:{password}@127.0.0.1:{port or self.port}/{database}"

    def _run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        cmd = [str(self.bin_dir / args[0]), *args[1:]]
        if self.run_as is not None:
            cmd = ["runuser", "-u", self.run_as, "--", *cmd]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=self.home)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stdout}{r.stderr}")
        return r

    def init(self) -> None:
        pw = self.home / "pw"
        pw.write_text(PASSWORD + "\n")
        self._chown(pw)
        self._run("initdb", "-D", str(self.data), "-U", USER, "--auth=scram-sha-256", f"--pwfile={pw}", "-E", "UTF8",
                  "--no-sync", "--locale=C")
        with open(self.data / "postgresql.conf", "a") as f:
            f.write(f"\nlisten_addresses = '127.0.0.1'\nport = {self.port}\nunix_socket_directories = '{self.home}'\n"
                    "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\nmax_connections = 100\n")

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.home / "server.log"), "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def create_database(self, name: str) -> str:
        """A new empty database ``name`` on this server; returns its URL."""
        env = {**os.environ, "PGPASSWORD": PASSWORD}
        subprocess.run([str(self.bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", USER, name],
                       check=True, capture_output=True, env=env, timeout=60)
        return self.url(database=name)

    def _chown(self, path: Path) -> None:
        if self.run_as is not None:
            pw = pwd.getpwnam(self.run_as)
            os.chown(path, pw.pw_uid, pw.pw_gid)


def start_server() -> PostgresServer:
    """Make and start a cluster (see the module's note).

    Raises:
        FileNotFoundError: no PostgreSQL server binaries on this machine.
        RuntimeError: initdb or pg_ctl failed (their output included).
    """
    bin_dir = pg_bin_dir()
    if bin_dir is None:
        raise FileNotFoundError("no PostgreSQL server binaries (initdb, pg_ctl) on PATH or in /usr/lib/postgresql/*/bin: "
                                "install the postgresql package (Debian: apt-get install -y postgresql)")
    run_as = None
    if os.geteuid() == 0:
        run_as = next((u for u in ("postgres", "nobody") if _has_user(u)), None)
        if run_as is None:
            raise RuntimeError("running as root and neither a 'postgres' nor a 'nobody' user exists to run PostgreSQL")
    home = Path(tempfile.mkdtemp(prefix="pawn-pg-"))
    os.chmod(home, 0o755)
    server = PostgresServer(bin_dir, home, _free_port(), run_as)
    server._chown(home)
    server.init()
    server.start()
    server.create_database(DATABASE)
    return server


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def wait_until_down(port: int, timeout: float = 30) -> None:
    """Wait until nothing accepts connections on 127.0.0.1:``port``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                pass
        except OSError:
            return
        time.sleep(0.1)
    raise TimeoutError(f"port {port} still accepts connections after {timeout} s")
