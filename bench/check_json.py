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
    "hot_key": ["raw_get"] + LOADERS + ["xfetch_bg"],
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
HIT_COST_SIZE = ["value_bytes", "get_server_us", "hit_server_us", "hit_server_all_cmds_us",
                 "server_ratio", "get_p50_us", "hit_p50_us", "client_ratio"]
HIT_COST_MEMORY = ["value_bytes", "entries", "set_bytes", "set_px_bytes", "xfetch_bytes",
                   "ratio", "ratio_set_px"]
HIT_OVERHEAD_RATIOS = ["xfetch_over_raw_get_p50_1conn", "xfetch_over_raw_get_rps_1conn",
                       "xfetch_over_raw_get_p50_50conn", "xfetch_over_raw_get_rps_50conn"]
# The goals each scenario measures in every run (hit_cost's depend on
# the sizes it ran, from its params).
GOALS_OF = {"hit_overhead": ["p50_1conn", "throughput_50conn"],
            "batch": ["batch_vs_mget", "batch_vs_sequential"],
            "tls": ["tls_p50_1conn", "tls_throughput_50conn", "tls_handshakes_per_conn"],
            "near": ["near_hit_vs_redis_hit", "near_cmds_per_10k", "near_stale_p99_ms",
                     "near_stale_over_1ms_faults", "near_wake_max_ms"],
            "tags": ["tags_hit_vs_untagged", "tags_hit_vs_untagged_near",
                     "tags_near_extra_cmds_per_hit", "tags_invalidate_p50_ms"]}
TLS_RATIOS = ["xfetch_over_raw_get_tls_p50_1conn", "xfetch_over_raw_get_tls_rps_1conn",
              "xfetch_over_raw_get_tls_p50_50conn", "xfetch_over_raw_get_tls_rps_50conn",
              "tls_over_plain_p50_1conn", "tls_over_plain_rps_1conn",
              "tls_over_plain_p50_50conn", "tls_over_plain_rps_50conn",
              "handshakes_per_connection"]
PLOTS = ["hot_key-loads.png", "hot_key-latency.png", "mass_expiry-loads.png",
         "beta_sweep.png"]


def is_num(v):
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)


def size_label(n):
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return f"{n}B"


def check_hit_cost(scenarios, goals, errors):
    """hit_cost: its two tables in params, and the goals they feed."""
    if "hit_overhead" in scenarios:
        params = scenarios["hit_overhead"].get("params") or {}
        for field in HIT_OVERHEAD_RATIOS:
            if not is_num(params.get(field)):
                errors.append(f"hit_overhead: {field} = {params.get(field)!r} is not a number")
    want = []
    for name, ids in GOALS_OF.items():
        if name in scenarios and "skipped" not in (scenarios[name].get("params") or {}):
            want += ids
    tls = scenarios.get("tls")
    if tls and "skipped" not in (tls.get("params") or {}):
        params = tls.get("params") or {}
        for field in TLS_RATIOS:
            if not is_num(params.get(field)):
                errors.append(f"tls: {field} = {params.get(field)!r} is not a number")
        for r in tls.get("results", []):
            if r.get("requests", 0) <= r.get("errors", 0):
                errors.append(f"tls: a run with {r.get('requests')} requests, "
                              f"{r.get('errors')} errors")
        modes = {(r.get("strategy"), r.get("tls"), r.get("connections"))
                 for r in tls.get("results", [])}
        ways = {(st, t, c) for st, t in (("raw_get", 1), ("xfetch", 1), ("xfetch", 0))
                for c in (1, 50)}
        if not ways <= modes:
            errors.append(f"tls: want a raw GET and a hit over TLS and a hit over plain TCP "
                          f"at 1 and 50 connections, got {modes}")
    if "hit_cost" not in scenarios:
        errors.append("hit_cost: scenario missing")
    if hc := scenarios.get("hit_cost"):
        params = hc.get("params") or {}
        for table, fields in (("sizes", HIT_COST_SIZE), ("memory", HIT_COST_MEMORY)):
            rows = params.get(table)
            if not isinstance(rows, list) or len(rows) < 2:
                errors.append(f"hit_cost: {table} missing or shorter than two sizes")
                continue
            for row in rows:
                for field in fields:
                    if not is_num(row.get(field)):
                        errors.append(f"hit_cost/{table}/{row.get('value_bytes')}: {field} = "
                                      f"{row.get(field)!r} is not a number")
        want.append("p50_1conn_interleaved")
        for row in params.get("sizes") or []:
            if isinstance(row.get("value_bytes"), int):
                want.append("hit_server_" + size_label(row["value_bytes"]))
        for row in params.get("memory") or []:
            if isinstance(row.get("value_bytes"), int):
                want.append("memory_" + size_label(row["value_bytes"]))
    if not isinstance(goals, list):
        errors.append("goals: missing")
        return
    measured = {g.get("id"): g.get("measured") for g in goals if isinstance(g, dict)}
    for gid in want:
        if not is_num(measured.get(gid)):
            errors.append(f"goals: {gid} = {measured.get(gid)!r} is not a number")


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
            # Transient errors are counted, not fatal; a run without one good
            # request has no figure.
            if r.get("requests", 0) <= 0:
                errors.append(f"{name}/{st}: no requests recorded")
            elif r.get("errors", 0) >= r.get("requests", 0):
                errors.append(f"{name}/{st}: every request failed ({r['errors']})")
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
    check_hit_cost(scenarios, doc.get("goals"), errors)
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
