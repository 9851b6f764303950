#!/usr/bin/python3
"""CI smoke check for xfetch-bench --json: every scenario, every strategy and
every required field present and numeric. Not a timing assertion.

usage: check_json.py bench.json [plots_dir]"""
import json
import math
import os
import shutil
import sys

REQUIRED = ["loads_per_expiry", "max_loads_per_expiry", "cold_loads", "waited_pct",
            "stale_pct", "p50_ms", "p99_ms", "p999_ms", "max_ms", "throughput_rps"]
LOADERS = ["naive", "lock", "xfetch_nolease", "xfetch"]
EXPECTED = {
    "hot_key": ["raw_get"] + LOADERS,
    "cold_start": LOADERS,
    "mass_expiry": LOADERS,
    "hit_overhead": ["raw_get", "xfetch"],
    "beta_sweep": ["xfetch_nolease"],
}
DRIVER_FIELDS = {
    "batch": ["mget_p50_us", "many_p50_us", "sequential_p50_us", "many_round_trips",
              "many_over_mget", "sequential_over_many"],
    "async": ["loop_rps", "loop_p50_us", "loop_p99_us", "threads_rps", "threads_p50_us"],
}
PLOTS = ["hot_key-loads.png", "hot_key-latency.png", "mass_expiry-loads.png",
         "beta_sweep.png"]


def main():
    errors = []
    try:
        with open(sys.argv[1]) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        print(f"check_json: cannot read {sys.argv[1]}: {e}", file=sys.stderr)
        return 1
    machine = doc.get("machine")
    if not isinstance(machine, dict) or "cpu" not in machine or "redis_version" not in machine:
        errors.append("machine: missing or incomplete")
    scenarios = {s.get("name"): s for s in doc.get("scenarios", [])}
    for name, strategies in EXPECTED.items():
        sc = scenarios.get(name)
        if sc is None:
            errors.append(f"{name}: scenario missing")
            continue
        if not isinstance(sc.get("params"), dict):
            errors.append(f"{name}: params missing")
        seen = set()
        for r in sc.get("results", []):
            st = r.get("strategy")
            seen.add(st)
            for field in REQUIRED:
                v = r.get(field)
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                    errors.append(f"{name}/{st}: {field} = {v!r} is not a number")
            if r.get("requests", 0) <= 0:
                errors.append(f"{name}/{st}: no requests recorded")
            if r.get("errors", 0) > 0:
                errors.append(f"{name}/{st}: {r['errors']} request errors")
        for st in strategies:
            if st not in seen:
                errors.append(f"{name}: strategy {st} missing")
    if mass := scenarios.get("mass_expiry"):
        jitters = {r.get("jitter") for r in mass.get("results", [])}
        if not ({0} < jitters and len(jitters) >= 2):
            errors.append("mass_expiry: want runs without and with jitter")
    if hit := scenarios.get("hit_overhead"):
        conns = {r.get("connections") for r in hit.get("results", [])}
        if not {1, 50} <= conns:
            errors.append("hit_overhead: want 1 and 50 connections")
    if beta := scenarios.get("beta_sweep"):
        betas = sorted(r.get("beta") for r in beta.get("results", []))
        if betas != [0.5, 1, 1.5, 2, 4]:
            errors.append(f"beta_sweep: betas {betas}")
        for r in beta.get("results", []):
            if not isinstance(r.get("theory_loads_per_expiry"), (int, float)):
                errors.append("beta_sweep: theory_loads_per_expiry missing")
    # The drivers' scenarios keep their figures in params (no strategies).
    for name, fields in DRIVER_FIELDS.items():
        params = (scenarios.get(name) or {}).get("params")
        if not isinstance(params, dict):
            errors.append(f"{name}: scenario or params missing")
            continue
        if params.get("skipped"):
            continue
        for field in fields:
            v = params.get(field)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                errors.append(f"{name}: {field} = {v!r} is not a number")
    if len(sys.argv) > 2 and shutil.which("gnuplot"):
        for p in PLOTS:
            path = os.path.join(sys.argv[2], p)
            if not os.path.isfile(path) or os.path.getsize(path) == 0:
                errors.append(f"plot {p} missing")
    for e in errors:
        print("check_json:", e, file=sys.stderr)
    if not errors:
        n = sum(len(s["results"]) for s in doc["scenarios"])
        print(f"check_json: OK ({len(doc['scenarios'])} scenarios, {n} results)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
