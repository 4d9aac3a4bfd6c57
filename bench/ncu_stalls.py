#!/usr/bin/env python3
"""Where a kernel's warps wait: Nsight Compute's source page (SASS, stall sampling) summed by stall reason, and
the instructions with the most samples with their main reasons.

    ncu --set full --import-source yes -k regex:NAME -c 1 -o rep BINARY ARGS
    ncu -i rep.ncu-rep --page source --csv --print-source sass > sass.csv
    python3 bench/ncu_stalls.py sass.csv [--top 25]
"""
import argparse
import collections
import csv
import sys


def number(text):
    try:
        return float(text) if text else 0.0
    except ValueError:
        return 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=25, help="instructions to list")
    args = ap.parse_args()
    rows = list(csv.reader(open(args.csv, newline="")))
    header_at = next((k for k, r in enumerate(rows) if "Address" in r and "Source" in r), None)
    if header_at is None:
        sys.exit(f"{args.csv}: no 'Address' / 'Source' header: not an ncu --page source --csv export")
    header, data = rows[header_at], [r for r in rows[header_at + 1:] if len(r) == len(rows[header_at])]
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    col = {h: header.index(h) for h in reasons}
    samples, source, executed = (header.index(h) for h in (
        "Warp Stall Sampling (All Samples)", "Source", "Instructions Executed"))
    total = sum(number(r[samples]) for r in data)
    if total == 0:
        sys.exit(f"{args.csv}: no stall samples")
    by_reason = collections.Counter()
    for r in data:
        for h in reasons:
            by_reason[h] += number(r[col[h]])
    reason_total = sum(by_reason.values()) or 1.0
    print(f"{len(data)} instructions, {total:.0f} samples")
    print("by reason: " + ", ".join(f"{h[6:]} {v / reason_total * 100:.1f}%" for h, v in by_reason.most_common(8)))
    print(f"{'samples':>8} {'executed':>10}  instruction  (main reasons)")
    for r in sorted(data, key=lambda r: -number(r[samples]))[:args.top]:
        main_reasons = sorted(((number(r[col[h]]), h[6:]) for h in reasons), reverse=True)[:2]
        why = ", ".join(f"{name} {v:.0f}" for v, name in main_reasons if v > 0)
        print(f"{number(r[samples]) / total * 100:7.1f}% {r[executed]:>10}  {r[source][:72]:72s} ({why})")


if __name__ == "__main__":
    main()
