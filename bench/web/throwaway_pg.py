"""A throwaway PostgreSQL cluster on loopback: initdb in a temp dir, started
with pg_stat_statements, removed by stop(). As root it runs as the
`postgres` user (PostgreSQL refuses root). Used by the web benchmark and
the FastAPI example's test."""
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time

BINDIR = os.environ.get("PG_BINDIR", "/usr/lib/postgresql/15/bin")


def available():
    """Whether PostgreSQL's server binaries are here and can run as this user."""
    if not os.path.exists(os.path.join(BINDIR, "pg_ctl")):
        return False
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return False
    return True


class ThrowawayPostgres:
    """Attributes: port, url (postgresql://postgres@127.0.0.1:port/postgres)."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="xfetch-pg.")
        self._as = []
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
            self._as = ["runuser", "-u", "postgres", "--"]
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        data = os.path.join(self.dir, "data")
        try:
            self._run("initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync",
                      "-E", "UTF8")
            self._run("pg_ctl", "-D", data, "-w", "-t", "30", "-l",
                      os.path.join(self.dir, "log"), "-o",
                      f"-k {self.dir} -c listen_addresses=127.0.0.1 -p {self.port} "
                      f"-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
                      f"-c max_connections=100 "
                      f"-c shared_preload_libraries=pg_stat_statements", "start")
            self.psql("CREATE EXTENSION pg_stat_statements")
        except BaseException:
            self.stop()
            raise

    def _run(self, tool, *args):
        out = subprocess.run([*self._as, os.path.join(BINDIR, tool), *args],
                             capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise RuntimeError(f"{tool} failed: {out.stderr.strip() or out.stdout.strip()}")
        return out.stdout

    def psql(self, sql):
        """Runs sql; returns psql's unaligned, tuples-only output."""
        return self._run("psql", "-X", "-q", "-A", "-t", "-h", "127.0.0.1", "-p",
                         str(self.port), "-U", "postgres", "-d", "postgres", "-c", sql)

    def calls(self, like):
        """The calls pg_stat_statements counted for the statements whose text
        is LIKE `like`."""
        sql = ("SELECT coalesce(sum(calls), 0) FROM pg_stat_statements "
               f"WHERE query LIKE '{like}'")
        return int(self.psql(sql).strip())

    def reset_stats(self):
        self.psql("SELECT pg_stat_statements_reset()")

    def stop(self):
        data = os.path.join(self.dir, "data")
        if os.path.exists(os.path.join(data, "postmaster.pid")):
            subprocess.run([*self._as, os.path.join(BINDIR, "pg_ctl"), "-D", data, "-m",
                            "immediate", "-w", "stop"], capture_output=True, timeout=60)
        deadline = time.monotonic() + 5
        while os.path.exists(os.path.join(data, "postmaster.pid")) and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        shutil.rmtree(self.dir, ignore_errors=True)
