"""The web benchmark: the FastAPI example service (two uvicorn processes) on a
throwaway PostgreSQL whose item query takes --query-ms (pg_sleep), with a
throwaway redis-server, loaded by wrk on one hot item across several ttl
expiries. For each variant: requests/s, p50/p99 latency (wrk), and the
item queries PostgreSQL ran (pg_stat_statements), in total and per ttl.
Variants: the service without a cache (XFETCH_ENABLED=0), xfetch defaults,
xfetch with the near cache, and two baselines (baseline_service.py): naive
redis-py cache-aside and Django's get_or_set on django-redis.
Writes web.csv (queries over time) and web_queries.png (gnuplot) in --out.

Run by `scripts/bench --web` (which installs what it needs)."""
import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time

import httpx
import redis

import xfetch.testing

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
EXAMPLES = os.path.join(ROOT, "bindings", "python", "examples")
sys.path.insert(0, HERE)
from throwaway_pg import ThrowawayPostgres  # noqa: E402

ITEM_QUERY = "%FROM items, pg_sleep%"
VARIANTS = [  # name, path, environment
    ("no cache", "/items/1", {"XFETCH_ENABLED": "0"}),
    ("xfetch defaults", "/items/1", {}),
    ("xfetch + near cache", "/items/1", {"XFETCH_NEAR_CACHE_BYTES": str(1 << 20)}),
    ("naive cache-aside", "/naive/items/1", {}),
    ("django-redis get_or_set", "/django/items/1", {}),
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_service(env, port):
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "baseline_service:app", "--app-dir", HERE, "--host",
         "127.0.0.1", "--port", str(port), "--workers", "2", "--log-level", "warning",
         "--no-access-log"],
        env=dict(os.environ, PYTHONPATH=EXAMPLES, **env),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while True:
        try:
            # both processes answer once each has run its startup: ask a few times
            ok = sum(httpx.get(f"http://127.0.0.1:{port}/cache/stats", timeout=5)
                     .status_code == 200 for _ in range(4))
            if ok == 4:
                return proc
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("the service did not start: " + proc.stderr.read().decode())
        time.sleep(0.2)


def stop_service(proc):
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wrk(url, seconds, threads, connections):
    out = subprocess.run(["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s",
                          "--timeout", "10s", "--latency", url],
                         capture_output=True, text=True, check=True).stdout

    def ms(label):
        m = re.search(rf"^\s*{label}%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        value, unit = float(m.group(1)), m.group(2)
        return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value

    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return rps, ms(50), ms(99), int(errors.group(1)) if errors else 0


def run_variant(pg, admin, name, path, env, args, port):
    admin.flushall()
    proc = start_service(dict(env, DATABASE_URL=pg.url, XFETCH_URL=args.redis_url,
                              ITEM_TTL=str(args.ttl),
                              SLOW_QUERY_SECONDS=str(args.query_ms / 1000)), port)
    try:
        url = f"http://127.0.0.1:{port}{path}"
        httpx.get(url, timeout=30).raise_for_status()  # the first load, not measured
        pg.reset_stats()
        samples, done = [], threading.Event()

        def sample():  # the item queries so far, every 0.25 s
            t0 = time.monotonic()
            while not done.wait(0.25):
                samples.append((time.monotonic() - t0, pg.calls(ITEM_QUERY)))

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            rps, p50, p99, errors = wrk(url, args.seconds, args.threads, args.connections)
        finally:
            done.set()
            sampler.join()
        queries = pg.calls(ITEM_QUERY)
    finally:
        stop_service(proc)
    return dict(name=name, rps=rps, p50=p50, p99=p99, errors=errors, queries=queries,
                per_ttl=queries / (args.seconds / args.ttl), samples=samples)


def plot(results, out):
    csv = os.path.join(out, "web.csv")
    with open(csv, "w") as f:
        f.write("variant,seconds,queries\n")
        for r in results:
            for t, q in r["samples"]:
                f.write(f"{r['name']},{t:.2f},{q}\n")
    if not shutil.which("gnuplot"):
        return csv, None
    png = os.path.join(out, "web_queries.png")
    data = []
    for r in results:
        data.append("\n".join(f"{t:.2f} {q}" for t, q in r["samples"]) + "\ne")
    lines = ", ".join(f"'-' using 1:2 with steps lw 2 title '{r['name']}'" for r in results)
    script = (f"set terminal pngcairo size 900,500\nset output '{png}'\n"
              "set title 'PostgreSQL item queries over time (cumulative)'\n"
              "set xlabel 'seconds'\nset ylabel 'queries'\nset key left top\n"
              "set logscale y\n"
              f"plot {lines}\n" + "\n".join(data) + "\n")
    subprocess.run(["gnuplot"], input=script, text=True, check=True)
    return csv, png


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=int, default=10, help="wrk duration per variant")
    ap.add_argument("--ttl", type=float, default=2.0, help="the item's ttl, seconds")
    ap.add_argument("--query-ms", type=float, default=50.0, help="the item query's time")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--out", default="bench-out")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    pg = ThrowawayPostgres()
    rs = xfetch.testing.RedisServer()
    args.redis_url = rs.url
    admin = redis.Redis(host="127.0.0.1", port=rs.port)
    results = []
    try:
        for name, path, env in VARIANTS:
            results.append(run_variant(pg, admin, name, path, env, args, free_port()))
            print(f"  {name}: done", file=sys.stderr, flush=True)
    finally:
        admin.close()
        rs.stop()
        pg.stop()
    print(f"web: the FastAPI example (2 uvicorn processes, asyncpg), item query "
          f"{args.query_ms:g} ms (pg_sleep), ttl {args.ttl:g} s, wrk -t{args.threads} "
          f"-c{args.connections} -d{args.seconds}s on one hot item "
          f"({args.seconds / args.ttl:g} ttls)")
    print(f"{'variant':<25}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'queries':>9}"
          f"{'per ttl':>9}{'non-2xx':>9}")
    for r in results:
        print(f"{r['name']:<25}{r['rps']:>9.0f}{r['p50']:>9.2f}{r['p99']:>9.2f}"
              f"{r['queries']:>9}{r['per_ttl']:>9.2f}{r['errors']:>9}")
    by = {r["name"]: r for r in results}
    xf, naive = by["xfetch defaults"], by["naive cache-aside"]
    print(f"goal: xfetch queries per ttl {xf['per_ttl']:.2f} (<= 1.2: "
          f"{'met' if xf['per_ttl'] <= 1.2 else 'NOT met'}); xfetch p99 {xf['p99']:.2f} ms vs "
          f"naive {naive['p99']:.2f} ms (<=: {'met' if xf['p99'] <= naive['p99'] else 'NOT met'})")
    csv, png = plot(results, args.out)
    print(f"queries over time: {csv}" + (f", {png}" if png else ""))


if __name__ == "__main__":
    main()
