#!/usr/bin/env python3
"""Groups an Nsight Compute CSV of kernel durations (ncu --csv --metrics gpu__time_duration.sum) by kernel
family: where a step's GPU time goes. Usage: kernel_breakdown.py NCU_CSV [--skip N] (skip the first N launches, or the first half)."""
import csv
import re
import sys
from collections import defaultdict


def family(name):
    n = name.lower()
    for key, label in (("gemm", "matmul (cuBLASLt)"), ("sm90_xmma", "matmul (cuBLASLt)"), ("cutlass", "matmul (cuBLASLt)"),
                       ("nvjet", "matmul (cuBLASLt)"), ("flash", "attention (cuDNN)"), ("cudnn", "attention (cuDNN)"),
                       ("fmha", "attention (cuDNN)"), ("sdpa", "attention (cuDNN)")):
        if key in n:
            return label
    m = re.match(r"(?:void )?(?:tk::cuda::)?(?:\(anonymous namespace\)::)?([A-Za-z0-9_]+)", name)
    return m.group(1) if m else name[:40]


rows = list(csv.reader(open(sys.argv[1])))
skip = sys.argv[sys.argv.index("--skip") + 1] if "--skip" in sys.argv else "0"
head = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
cols = rows[head]
ki, mi, vi, ui = cols.index("Kernel Name"), cols.index("Metric Name"), cols.index("Metric Value"), cols.index("Metric Unit")
times = []
for r in rows[head + 1:]:
    if len(r) > vi and r[mi] == "gpu__time_duration.sum":
        v = float(r[vi].replace(",", ""))
        scale = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}.get(r[ui], 1e-6)
        times.append((r[ki], v * scale))
# "half": the run was a warm-up step and a measured step with the same launches; keep the second.
times = times[len(times) // 2:] if skip == "half" else times[int(skip):]
total = sum(t for _, t in times)
by = defaultdict(lambda: [0, 0.0])
by_name = defaultdict(lambda: [0, 0.0])
for name, t in times:
    by[family(name)][0] += 1
    by[family(name)][1] += t
    by_name[name[:110]][0] += 1
    by_name[name[:110]][1] += t
print(f"{len(times)} kernels, {total:.2f} ms of GPU time")
print(f"{'family':<40} {'calls':>6} {'ms':>9} {'share':>7}")
for k, (c, t) in sorted(by.items(), key=lambda kv: -kv[1][1]):
    print(f"{k:<40} {c:>6} {t:>9.3f} {100 * t / total:>6.1f}%")
print("\ntop kernels:")
for k, (c, t) in sorted(by_name.items(), key=lambda kv: -kv[1][1])[:25]:
    print(f"{t:>9.3f} ms {c:>5}x  {k}")
