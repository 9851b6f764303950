"""A throwaway redis-server for tests, examples and benchmarks: a free
loopback port and a Unix socket in a temp dir, no persistence.

    with xfetch.testing.RedisServer() as srv:
        cache = xfetch.Cache(srv.url)
"""
import os
import shutil
import socket
import subprocess
import tempfile
import time


def free_port():
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """Starts redis-server (from PATH) and waits until it answers PING.
    Attributes: port, url (redis://), unix_path, unix_url (unix://)."""

    def __init__(self, tmpdir=None, extra_args=()):
        exe = shutil.which("redis-server")
        if not exe:
            raise FileNotFoundError("redis-server is not on PATH")
        self._own_dir = tmpdir is None
        self.dir = tempfile.mkdtemp(prefix="xfetch-redis.") if tmpdir is None else tmpdir
        self.port = free_port()
        self.unix_path = os.path.join(self.dir, "redis.sock")
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.unix_url = f"unix://{self.unix_path}"
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
             "--save", "", "--appendonly", "no", "--unixsocket", self.unix_path,
             "--unixsocketperm", "700", "--loglevel", "warning", *extra_args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not self._answers():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError("redis-server did not start")
            time.sleep(0.01)

    def _answers(self):
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self):
        """Terminates the server and removes its temp dir (if it made it)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
