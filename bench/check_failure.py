#!/usr/bin/python3
"""The bench's failure path: xfetch-bench --redis against a redis-server that
is killed in the middle of hot_key's naive run. Asserts that the run in
progress counts its failed requests (not fatal; the first error named with
its code and message), that the next run, which cannot connect, fails naming
the scenario, the step and the error, and that the bench exits non-zero. No
timing is asserted.

usage: check_failure.py path/to/xfetch-bench"""
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command(port, *args):
    """One RESP command on a new connection; the reply's raw bytes (b"" when
    the server is not there)."""
    req = b"*%d\r\n" % len(args) + b"".join(
        b"$%d\r\n%s\r\n" % (len(a), a.encode()) for a in args)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(req)
            return s.recv(65536)
    except OSError:
        return b""


def main():
    bench = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="xfb-failure-")
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", tmp], stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        while not command(port, "PING").startswith(b"+PONG"):
            if server.poll() is not None:
                print("check_failure: redis-server did not start", file=sys.stderr)
                return 1
            time.sleep(0.02)
        err = open(os.path.join(tmp, "stderr"), "w+")
        out = open(os.path.join(tmp, "stdout"), "w+")
        # hot_key's runs in --quick: raw_get (1 s), then naive, whose run
        # lasts 0.3 + 1.6 x ttl = 6.7 s with a 4 s ttl: the margin the kill
        # below has to land inside it (it lands within milliseconds of the
        # naive run's first write on a quiet machine).
        run = subprocess.Popen(
            [bench, "--redis", f"redis://127.0.0.1:{port}", "--scenarios", "hot_key",
             "--quick", "--hot-ttl-ms", "4000", "--no-plots"], stdout=out, stderr=err)
        deadline = time.monotonic() + 60
        while b"naive" not in command(port, "KEYS", "xfb:*:hot_key:naive:*"):
            if run.poll() is not None or time.monotonic() > deadline:
                print("check_failure: the naive run never wrote its key", file=sys.stderr)
                return 1
            time.sleep(0.01)
        server.send_signal(signal.SIGKILL)
        server.wait()
        rc = run.wait(timeout=90)
        err.seek(0)
        text = err.read()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    print(text, end="")
    code = r"(XF_E[A-Z]+|REDIS_ERR_[A-Z]+) \(-?\d+\): \S"
    checks = [
        ("the bench exits non-zero", rc != 0),
        ("the naive run counts its failed requests and names the first error",
         re.search(r"^xfetch-bench: hot_key: naive: requests: \d+ of \d+ calls failed, "
                   r"counted in its figures \(first: .*" + code, text, re.M)),
        ("the next run's failure names the scenario, the step and the error",
         re.search(r"^xfetch-bench: hot_key: lock: .*" + code, text, re.M)),
        ("the scenario is said to have failed",
         re.search(r"^xfetch-bench: scenario hot_key failed", text, re.M)),
    ]
    bad = [what for what, ok in checks if not ok]
    for what in bad:
        print(f"check_failure: missing: {what}", file=sys.stderr)
    if not bad:
        print("check_failure: OK")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
