#!/usr/bin/env python3
"""A run's TensorBoard event files read by TensorBoard's own reader: every number of log.jsonl is a scalar of the
same name, at the same step and time, with its value in float32 (what TensorBoard keeps).

It learns a 4096-token BPE from the Brown Corpus (`tokamak train-tokenizer`), prepares the corpus with it, trains the
tiny preset for 12 steps (validation every 4, a checkpoint every 4), then resumes from step 4 with --overwrite, as a
run continued from an earlier checkpoint: log.jsonl drops its records after step 4 and the resumed run's event file
starts a session at step 5, after which TensorBoard drops the first file's later steps. It reads the run directory
with tensorboard.backend.event_processing's EventAccumulator and checks, tag by tag, that the scalars are exactly
log.jsonl's numbers (the step records, the validations, the clock and memory figures; on a GPU the SM clock and
power too). Needs python3 with tensorboard, the Brown Corpus in .cache/brown (scripts/setup.sh), no network:

    python3 tests/hf/tensorboard_check.py --tokamak build-gpu/tokamak [--device cuda] [--keep DIR]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import tensorboard
from tensorboard.backend.event_processing import event_accumulator


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return r


def make_run(args, work):
    """The resumed run's directory."""
    tk = args.tokamak
    tok, data, run_dir = (os.path.join(work, d) for d in ("tok", "data", "run"))
    run([tk, "train-tokenizer", "--input", args.corpus, "--vocab-size", "4096", "--out", tok])
    run([tk, "prepare", "--tokenizer", tok, "--input", args.corpus, "--out", data])
    train = [tk, "train", "--model", "tiny", "--data", data, "--out", run_dir, "--batch", "4", "--seq", "64",
             "--steps", "12", "--warmup", "2", "--eval-every", "4", "--eval-tokens", "1024", "--save-every", "4",
             "--keep-checkpoints", "0", "--device", args.device]
    run(train + ["--overwrite"])
    run(train + ["--resume", os.path.join(run_dir, "step_000004"), "--overwrite"])
    return run_dir


def expected_scalars(run_dir):
    """log.jsonl's numbers by tag: [(step, time, value as float32)], in the file's order."""
    out = {}
    with open(os.path.join(run_dir, "log.jsonl")) as f:
        for line in f:
            record = json.loads(line)
            for name, value in record.items():
                if name in ("step", "time") or isinstance(value, bool) or not isinstance(value, (int, float)):
                    continue
                out.setdefault(name, []).append((record["step"], record["time"], np.float32(value)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokamak", default="build-gpu/tokamak", help="path to the tokamak binary")
    ap.add_argument("--corpus", default=".cache/brown", help="text to learn the tokenizer from and train on")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="tokamak's training backend")
    ap.add_argument("--keep", metavar="DIR", help="keep the tokenizer, data and run under DIR")
    args = ap.parse_args()
    if not os.access(args.tokamak, os.X_OK):
        sys.exit(f"error: {args.tokamak} is not an executable tokamak binary (--tokamak PATH)")
    args.tokamak = os.path.abspath(args.tokamak)
    print(f"tensorboard {tensorboard.__version__}; tokamak {args.tokamak}")
    work = args.keep or tempfile.mkdtemp(prefix="tk_tensorboard_check_")
    os.makedirs(work, exist_ok=True)
    failures = []
    try:
        run_dir = make_run(args, work)
        files = sorted(f for f in os.listdir(run_dir) if f.startswith("events.out.tfevents."))
        print(f"  event files: {len(files)} (the run and its resumption)")
        if len(files) != 2:
            failures.append(f"{len(files)} event files in {run_dir}, not 2")
        acc = event_accumulator.EventAccumulator(run_dir, size_guidance={event_accumulator.SCALARS: 0})
        acc.Reload()
        expected = expected_scalars(run_dir)
        tags = set(acc.Tags()["scalars"])
        wanted = {"loss", "lr", "grad_norm", "tokens_per_s", "memory_bytes", "elapsed_s", "val_loss"}
        if args.device == "cuda":
            wanted |= {"sm_clock_mhz", "power_w", "mfu"}
        for tag in sorted(wanted - set(expected)):
            failures.append(f"log.jsonl has no {tag}")
        if tags != set(expected):
            failures.append(f"tags differ: only in the event files {sorted(tags - set(expected))}, only in log.jsonl "
                            f"{sorted(set(expected) - tags)}")
        for tag in sorted(set(expected) & tags):
            got = [(e.step, e.wall_time, np.float32(e.value)) for e in acc.Scalars(tag)]
            ok = got == expected[tag]
            print(f"  {tag:<24} {len(got):>3} scalars  {'ok' if ok else 'FAIL'}")
            if not ok:
                failures.append(f"{tag}: the event files give {got[:4]}..., log.jsonl {expected[tag][:4]}...")
        steps = [e.step for e in acc.Scalars("loss")] if "loss" in tags else []
        if steps != list(range(1, 13)):
            failures.append(f"the loss's steps are {steps}, not 1..12 once each")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    for f in failures:
        print(f"FAIL {f}")
    print(f"{'PASS' if not failures else 'FAIL'}: TensorBoard's reader gives log.jsonl's numbers, {len(failures)} "
          f"failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
