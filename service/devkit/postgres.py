"""A private PostgreSQL server on loopback for tests and benches: initdb into a fresh directory, start, kill -9,
restart, stop; run as the postgres user when we are root (PostgreSQL refuses to run as root)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from service.devkit.sandbox.stack import free_port

DATABASE = "compileci"


def _binary(name: str) -> str:
    """Debian keeps the server's programs out of PATH, in /usr/lib/postgresql/<major>/bin."""
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None)
    if found is None:
        raise RuntimeError(f"PostgreSQL's {name} is not installed (apt-get install postgresql-15)")
    return found


class LocalPostgres:
    """One server in its own directory under /tmp; `url` is the SQLAlchemy URL of its `compileci` database."""

    def __init__(self, *, fast: bool = True, disk_mb: int = 0) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="compile-ci-pg-"))
        self.data = self.root / "data"
        # > 0: the database lives on a tmpfs of this size of its own (a tablespace; root only), so that it can
        # be filled up for real while the server's WAL, on the larger disk, keeps working.
        self.disk_mb = disk_mb
        self.disk = self.root / "disk"
        self.port = free_port()
        # fsync off: a test's data need not survive a power cut; the fault bench keeps it on (fast=False).
        self._options = [self._listen(),
                         *(["-c fsync=off -c synchronous_commit=off -c full_page_writes=off"] if fast else [])]
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self._as:
            user = pwd.getpwnam("postgres")
            os.chown(self.root, user.pw_uid, user.pw_gid)

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{DATABASE}"

    def _run(self, *args: str) -> str:
        proc = subprocess.run([*self._as, *args], capture_output=True, text=True, check=False, cwd=self.root)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(args[:2])} failed: {proc.stderr.strip() or proc.stdout.strip()}")
        return proc.stdout

    def start(self) -> LocalPostgres:
        if not (self.data / "PG_VERSION").exists():
            self._run(_binary("initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                      "--no-instructions")
            self._pg_ctl_start(first=True)
            tablespace = " TABLESPACE small_disk" if self._mount_small_disk() else ""
            self.sql(f"CREATE DATABASE {DATABASE}{tablespace}", database="postgres")
        else:
            self._pg_ctl_start()
        return self

    def _mount_small_disk(self) -> bool:
        if not self.disk_mb:
            return False
        if os.geteuid() != 0:
            raise RuntimeError("a small disk for PostgreSQL needs root (mount -t tmpfs)")
        self.disk.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.disk_mb}m", "tmpfs", str(self.disk)], check=True)
        user = pwd.getpwnam("postgres")
        os.chown(self.disk, user.pw_uid, user.pw_gid)
        self.sql(f"CREATE TABLESPACE small_disk LOCATION '{self.disk}'", database="postgres")
        return True

    def fill_disk(self) -> int:
        """Fill the small disk until PostgreSQL answers "No space left on device"; megabytes written."""
        self.sql("CREATE TABLE disk_filler (b bytea)")
        self.sql("ALTER TABLE disk_filler ALTER COLUMN b SET STORAGE EXTERNAL")  # not compressed: real bytes
        written_kb = 0
        for chunk_kb in (4096, 1024, 128, 8):
            while True:
                rows = f"SELECT decode(repeat('ab', {chunk_kb * 1024}), 'hex') FROM generate_series(1, 1)"
                try:
                    self.sql(f"INSERT INTO disk_filler {rows}")
                except RuntimeError as exc:
                    if "space" not in str(exc):
                        raise
                    break
                written_kb += chunk_kb
        return written_kb // 1024

    def free_disk(self) -> None:
        self.sql("DROP TABLE disk_filler")

    def _pg_ctl_start(self, *, first: bool = False) -> None:
        """Start the server; on its first start, a port another process took since `free_port` chose it is
        swapped for a new one (a restart keeps its port: clients hold the URL). A failure quotes the server's log."""
        for attempt in range(5):
            log = self.root / f"server{attempt or ''}.log"
            try:
                self._run(_binary("pg_ctl"), "-D", str(self.data), "-l", str(log), "-w", "-t", "60",
                          "-o", " ".join(self._options), "start")
                return
            except RuntimeError as exc:
                said = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                if first and "already in use" in said and attempt < 4:
                    self.port = free_port()
                    self._options[0] = self._listen()
                    continue
                raise RuntimeError(f"{exc}\nthe server's log ({log}):\n{said.strip()}") from None

    def _listen(self) -> str:
        return f"-c listen_addresses=127.0.0.1 -c port={self.port} -c unix_socket_directories={self.root}"

    def create_database(self, name: str) -> str:
        """A fresh database on this server (one per test); its SQLAlchemy URL."""
        self.sql(f"CREATE DATABASE {name}", database="postgres")
        return self.url.rsplit("/", 1)[0] + f"/{name}"

    def sql(self, *statements: str, database: str = DATABASE) -> str:
        """Run statements with psql, each in its own transaction, in one session; the rows it printed unaligned."""
        commands = [arg for statement in statements for arg in ("-c", statement)]
        return self._run("psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", database,
                         "-v", "ON_ERROR_STOP=1", "-At", *commands)

    def postmaster_pid(self) -> int:
        return int((self.data / "postmaster.pid").read_text().split()[0])

    def kill(self) -> None:
        """kill -9 of the server (its backends go with it), as an OOM killer or a lost host would."""
        pid = self.postmaster_pid()
        os.kill(pid, signal.SIGKILL)
        for line in subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split():
            try:
                os.kill(int(line), signal.SIGKILL)
            except ProcessLookupError:
                pass

    def restart_after_kill(self) -> None:
        (self.data / "postmaster.pid").unlink(missing_ok=True)
        self._pg_ctl_start()

    def stop_server(self) -> None:
        """A clean shutdown (an operator's, or the host going down); start() brings it back with its data."""
        self._run(_binary("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            try:
                self._run(_binary("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
            except RuntimeError:
                pass  # killed and not restarted
        if self.disk_mb and self.disk.is_dir():
            subprocess.run(["umount", str(self.disk)], check=False)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LocalPostgres:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *_exc: object) -> None:
        self.stop()
