#!/usr/bin/env python3
"""Checks the data-parallel path at world size 1 on one GPU (tests/gpu/run.sh dist) from the runs' log.jsonl files:
each `--gpus 1` run against the plain run of the same settings (losses bitwise equal where the path computes the same
sums, else within a relative tolerance), the communication fields each data-parallel step logs, and the speed of the
long runs (each within the slowdown it is given against the plain one). Prints one PASS or FAIL line a check; exits 1
on any FAIL.

Usage: dist_check.py losses PLAIN RUN TOLERANCE [RUN TOLERANCE ...]   (tolerance 0: bitwise)
       dist_check.py speed PLAIN RUN SLOWDOWN [RUN SLOWDOWN ...]   (slowdown 0.01: at most 1% fewer tokens/s)"""
import json
import math
import sys

WAIT_LATENCY_S = 50e-6
COMM_FIELDS = ("comm_s", "comm_exposed_s", "comm_host_s", "comm_collectives", "data_wait_by_rank_s")


def steps(run):
    rows = []
    with open(f"{run}/log.jsonl") as f:
        for line in f:
            r = json.loads(line)
            if "step" in r and "loss" in r and "val_loss" not in r and r.get("type", "train") == "train":
                rows.append(r)
    if not rows:
        sys.exit(f"{run}: no training steps in log.jsonl")
    return rows


def check_losses(plain, runs):
    failed = False
    base = [r["loss"] for r in steps(plain)]
    for run, tol in runs:
        rows = steps(run)
        got = [r["loss"] for r in rows]
        worst = max((abs(a - b) / max(abs(a), 1e-12) for a, b in zip(base, got)), default=math.inf)
        ok = len(got) == len(base) and (got == base if tol == 0 else worst <= tol)
        want = "bitwise" if tol == 0 else f"within {tol:g}"
        print(f"{'PASS' if ok else 'FAIL'} {run}: {len(got)} losses against {len(base)}, {want} of {plain} "
              f"(largest relative difference {worst:.2e}; last {got[-1]!r} against {base[-1]!r})")
        missing = [k for k in COMM_FIELDS if any(k not in r for r in rows)]
        bad = [k for k in COMM_FIELDS[:4] if any(not (r.get(k, -1) >= 0 and math.isfinite(r.get(k, -1))) for r in rows)]
        # A wait's exposed time is the rest of the collectives it waits for plus the wait's own signalling between
        # the streams (a few microseconds), which at world size 1, where each collective is a copy or nothing, is
        # most of it: so the exposed time may pass the collectives' by WAIT_LATENCY_S a collective, no more.
        exposed = all(r["comm_exposed_s"] <= r["comm_s"] + r.get("comm_collectives", 0) * WAIT_LATENCY_S + 1e-6
                      for r in rows if "comm_s" in r and "comm_exposed_s" in r)
        fields_ok = not missing and not bad and exposed and all(r.get("comm_collectives", 0) > 0 for r in rows)
        last = rows[-1]
        print(f"{'PASS' if fields_ok else 'FAIL'} {run}: communication fields"
              + (f" missing {missing}" if missing else "") + (f" not finite and >= 0: {bad}" if bad else "")
              + ("" if exposed else f" exposed above the collectives' time and {WAIT_LATENCY_S * 1e6:.0f} us a wait")
              + f" (last step: {last.get('comm_collectives')} collectives, {1e3 * last.get('comm_s', 0):.2f} ms, "
              f"{1e3 * last.get('comm_exposed_s', 0):.2f} exposed, host {1e3 * last.get('comm_host_s', 0):.2f} ms)")
        failed |= not (ok and fields_ok)
    return failed


def check_speed(plain, runs_and_slowdowns):
    def rate(run):
        rows = steps(run)[4:]  # past the first steps' warm-up (GEMM tuning, allocations)
        return sum(r["tokens_per_s"] for r in rows) / len(rows)

    base = rate(plain)
    failed = False
    for run, slowdown in runs_and_slowdowns:
        r = rate(run)
        ok = r >= (1 - slowdown) * base
        print(f"{'PASS' if ok else 'FAIL'} {run}: {r:,.0f} tokens/s against {base:,.0f} plain ({100 * (r / base - 1):+.2f}%, "
              f"at most -{100 * slowdown:g}%)")
        failed |= not ok
    return failed


def main():
    if len(sys.argv) < 4 or sys.argv[1] not in ("losses", "speed"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    pairs = sys.argv[3:]
    try:
        if len(pairs) % 2:
            raise ValueError("a run without its tolerance")
        pairs = [(pairs[i], float(pairs[i + 1])) for i in range(0, len(pairs), 2)]
    except ValueError as e:
        print(f"error: {e}\n\n{__doc__}", file=sys.stderr)
        sys.exit(2)
    failed = (check_losses if sys.argv[1] == "losses" else check_speed)(sys.argv[2], pairs)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
