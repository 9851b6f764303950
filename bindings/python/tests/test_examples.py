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
    out = run("bench_hit.py", "--url", server.url, "-n", "200", "--rounds", "2")
    assert re.search(r"ratio xfetch / GET  :\s+\d+\.\d+", out)
