"""A throwaway redis-server for tests, examples and benchmarks: a free
loopback port and a Unix socket in a temp dir, no persistence.

    with xfetch.testing.RedisServer() as srv:
        cache = xfetch.Cache(srv.url)
"""
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time


_ports = random.SystemRandom()  # no state: neither random.seed() nor fork() repeats its ports


def free_port():
    """A TCP port that was free on 127.0.0.1 a moment ago, drawn below the
    kernel's ephemeral range (32768 and up on Linux), where any outgoing
    connection could take it before a server binds it."""
    for _ in range(100):
        port = _ports.randrange(10000, 32000)
        if _port_free(port):
            return port
    raise RuntimeError("no free loopback port in 10000-32000")


class RedisServer:
    """Starts redis-server (from PATH) and waits until it answers PING.
    Attributes: port, url (redis://), unix_path, unix_url (unix://)."""

    def __init__(self, tmpdir=None, extra_args=()):
        exe = shutil.which("redis-server")
        if not exe:
            raise FileNotFoundError("redis-server is not on PATH")
        self._own_dir = tmpdir is None
        self.dir = tempfile.mkdtemp(prefix="xfetch-redis.") if tmpdir is None else tmpdir
        self.unix_path = os.path.join(self.dir, "redis.sock")
        self.unix_url = f"unix://{self.unix_path}"
        # A port another process took meanwhile makes the server exit: the
        # next attempt draws another.
        for _ in range(5):
            self.port = free_port()
            self.url = f"redis://127.0.0.1:{self.port}/0"
            self.proc = subprocess.Popen(
                [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
                 "--save", "", "--appendonly", "no", "--unixsocket", self.unix_path,
                 "--unixsocketperm", "700", "--loglevel", "warning", *extra_args],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 20
            while not self._answers() and self.proc.poll() is None:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("redis-server did not answer within 20 s")
                time.sleep(0.01)
            if self.proc.poll() is None:
                return
        self.stop()
        raise RuntimeError("redis-server did not start (5 ports tried)")

    def _answers(self):
        """Whether this server answers PING on its own Unix socket (another
        server that took the TCP port would answer there; redis-server
        opens its Unix socket after its TCP port)."""
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(1)
                s.connect(self.unix_path)
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


def _port_free(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


class RedisCluster:
    """A throwaway Redis Cluster on loopback: `masters` redis-servers with
    --cluster-enabled (and `replicas` per master), joined with
    `redis-cli --cluster create`, ready when every node says cluster_state:ok
    and every replica has synced. Attributes: ports, procs (their
    subprocess.Popen, in the same order), url (redis://127.0.0.1:<first port>/0, enough to reach
    every node), seeds_url (every node, comma-separated)."""

    def __init__(self, masters=3, replicas=0):
        for exe in ("redis-server", "redis-cli"):
            if not shutil.which(exe):
                raise FileNotFoundError(f"{exe} is not on PATH")
        self.dir = tempfile.mkdtemp(prefix="xfetch-cluster.")
        self.procs = []
        n = masters * (1 + replicas)
        base = 20000 + (os.getpid() * 7) % 9000
        try:
            # A port found free can be taken before its node binds it (other
            # test processes start servers too): a node that exits at once is
            # started again on other ports, up to five times.
            for attempt in range(5):
                # Each node's bus port is its port + 10000: both must be free.
                while not all(_port_free(p) and _port_free(p + 10000)
                              for p in range(base, base + n)):
                    base = 20000 + (base + n - 20000) % 9000
                self.ports = list(range(base, base + n))
                if self._start_nodes():
                    break
                self._stop_nodes()
                base = 20000 + (base + n - 20000) % 9000
            else:
                raise RuntimeError(f"cluster nodes exited at start (logs in {self.dir})")
            subprocess.run(["redis-cli", "--cluster", "create",
                            *[f"127.0.0.1:{p}" for p in self.ports],
                            "--cluster-replicas", str(replicas), "--cluster-yes"],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self._wait(lambda p: "cluster_state:ok" in self._info(p, "CLUSTER INFO"))
            # replicas: ready once synced (a failover needs a replica with data)
            self._wait(lambda p: "role:master" in (info := self._info(p, "INFO replication"))
                       or "master_link_status:up" in info)
        except BaseException:
            self.stop()
            raise
        self.url = f"redis://127.0.0.1:{self.ports[0]}/0"
        self.seeds_url = "redis://" + ",".join(f"127.0.0.1:{p}" for p in self.ports) + "/0"

    def _start_nodes(self):
        """Starts a node on each of self.ports; False if one exited before
        it answered (its port was taken meanwhile)."""
        self.procs = []
        for port in self.ports:
            d = os.path.join(self.dir, str(port))
            os.makedirs(d, exist_ok=True)
            self.procs.append(subprocess.Popen(
                ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", d,
                 "--cluster-enabled", "yes", "--cluster-node-timeout", "3000",
                 "--save", "", "--appendonly", "no", "--loglevel", "warning",
                 # replicas sync at once (else 5 s late: no failover before)
                 # and are pinged every second (CLUSTER SLOTS lists them)
                 "--repl-diskless-sync-delay", "0", "--repl-ping-replica-period", "1"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        exited = []

        def answers(port):
            proc = self.procs[self.ports.index(port)]
            if proc.poll() is not None:
                exited.append(port)
                return True  # judged below
            # as itself: a server that took the port would answer too
            return f"process_id:{proc.pid}\n" in self._info(port, "INFO server")
        self._wait(answers)
        return not exited

    def _stop_nodes(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = []

    @staticmethod
    def _info(port, command):
        try:
            out = subprocess.run(["redis-cli", "-p", str(port), *command.split()],
                                 capture_output=True, text=True, timeout=5).stdout
            return "+PONG" if out.strip() == "PONG" else out
        except (OSError, subprocess.SubprocessError):
            return ""

    def _wait(self, ready, timeout=90):
        # 90 s for every node of one step: six nodes starting, creating and
        # syncing beside a memcheck run and two CPU loops missed 30 s once
        deadline = time.monotonic() + timeout
        for port in self.ports:
            while not ready(port):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"cluster node {port} not ready (logs in {self.dir})")
                time.sleep(0.05)

    def stop(self):
        """Terminates every node and removes the temp dir."""
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            p.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
