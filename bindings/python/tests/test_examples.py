"""The example and the bench script run (short settings; no timing asserted)."""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run(script, *args):
    out = subprocess.run([sys.executable, os.path.join(HERE, "..", script), *args],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_stampede_example(server):
    out = run("examples/stampede.py", "--url", server.url, "--threads", "8", "--seconds",
              "1.2", "--ttl", "0.5", "--load-time", "0.05")
    naive = re.search(r"naive: .*recomputation: ([\d ]+)", out).group(1).split()
    xf = re.search(r"xfetch: .*recomputation: ([\d ]+)", out).group(1).split()
    assert max(map(int, naive)) > 1  # the stampede happens
    assert set(xf) == {"1"}  # one loader at a time with xfetch


def test_bench_hit_script(server):
    # timeout 30 s: the script's output is checked, not its speed; a reply
    # later than the default 1 s on a busy machine (memcheck beside it) opened
    # a Cache's breaker and a hit ran the loader ("a hit must not call the
    # loader")
    out = run("bench_hit.py", "--url", server.url, "-n", "200", "--rounds", "2",
              "--timeout", "30")
    row = r"\s+\d+\.\d+\s+\d+\.\d+\s+[\d,]+"
    for name in ("redis-py GET", "xfetch get_or_compute \\(sync\\)",
                 "redis-py asyncio GET", r"xfetch (Cache\.)?get_many\(100\)( via ffi)?",
                 "100 x xfetch get_or_compute", r"redis-py MGET\(100\)"):
        assert re.search(name + row, out), name
    assert re.search(r"xfetch\.aio get_or_compute(" + row + r"| +n/a \(xfetch\.aio not built\))",
                     out)
    assert re.search(r"dogpile\.cache get_or_create(" + row + r"| +n/a \(dogpile)", out)
    faces = ("sync", "sync, near") + (() if "xfetch.aio not built" in out else ("aio", "aio, near"))
    for face in faces:  # the tags goal, each face, near cache off and on
        assert re.search(r"2 tags / untagged, " + face + r" +: p50 +\d+\.\d+, mean", out), face
    assert re.search(r"sync hit p50 / redis-py GET p50 +:\s+\d+\.\d+  \(goal <= 1\.2: ", out)
    assert re.search(r"100 x get / get_many\(100\), p50 +:\s+\d+\.\dx", out)
    if "xfetch.aio not built" not in out:  # hits made by many tasks at once
        for name in ("redis-py asyncio GET", r"xfetch\.aio get_or_compute"):
            for tasks in (10, 100):
                assert re.search(name + rf" +{tasks} +[\d,]+\n", out), (name, tasks)
