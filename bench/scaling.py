"""Data-parallel scaling (bench/scaling.sh). `row RUN_DIR CONFIG PRECISION GPUS ZERO` prints one JSON line from a
tokamak run directory: the mean tokens/s over all GPUs of the steps after the first 4 (log.jsonl), and the memory
per GPU (memory.json's total). `table TOKAMAK.jsonl PEER.jsonl` prints the markdown table: tokens/s, memory and
scaling efficiency = rate on N GPUs / (N x the same engine's rate on 1 GPU)."""
import json
import os
import sys

WARM_STEPS = 4


def run_row(run_dir, config, precision, gpus, zero):
    row = dict(config=config, engine=f"tokamak {precision}", gpus=int(gpus), zero=int(zero))
    try:
        steps = [json.loads(l) for l in open(os.path.join(run_dir, "log.jsonl")) if '"tokens_per_s"' in l]
    except FileNotFoundError:
        return dict(row, error="no log.jsonl: the run failed")
    timed = steps[WARM_STEPS:] or steps
    if not timed:
        return dict(row, error="no step finished")
    row["tok_s"] = round(sum(s["tokens_per_s"] for s in timed) / len(timed))
    try:
        row["mem_gib"] = round(json.load(open(os.path.join(run_dir, "memory.json")))["total_bytes"] / 2**30, 1)
    except (FileNotFoundError, KeyError, ValueError):
        pass
    return row


def read(path):
    try:
        return [json.loads(l) for l in open(path) if l.strip().startswith("{")]
    except FileNotFoundError:
        return []


def table(tokamak, peer):
    """Each row's scaling is against the same engine (tokamak at that precision, or torch.compile) on one GPU."""
    rows = [dict(r, family=r["engine"], name=r["engine"] + (f", ZeRO {r['zero']}" if r["gpus"] > 1 else ""))
            for r in tokamak]
    for p in peer:
        if p.get("mode") != "compile":
            continue
        many = p.get("gpus", 1) > 1
        rows.append(dict(config=p["config"], family="torch.compile", gpus=p.get("gpus", 1), tok_s=p.get("tok_s"),
                         mem_gib=p.get("peak_mem_gib"), error=p.get("error"),
                         name="torch.compile" + (f" {p.get('dist')}" if many else "")))
    one = {(r["config"], r["family"]): r["tok_s"] for r in rows if r["gpus"] == 1 and r.get("tok_s")}
    out = ["| config | engine | GPUs | tokens/s | GiB per GPU | scaling |", "|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("error") or not r.get("tok_s"):
            out.append(f"| {r['config']} | {r['name']} | {r['gpus']} | {r.get('error') or 'failed'} | | |")
            continue
        base = one.get((r["config"], r["family"]))
        scaling = f"{100 * r['tok_s'] / (r['gpus'] * base):.1f}%" if base and r["gpus"] > 1 else ""
        mem = "" if r.get("mem_gib") is None else f"{r['mem_gib']}"
        out.append(f"| {r['config']} | {r['name']} | {r['gpus']} | {r['tok_s']:,} | {mem} | {scaling} |")
    return "\n".join(out)


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] == "row":
        print(json.dumps(run_row(*sys.argv[2:])))
    elif len(sys.argv) == 4 and sys.argv[1] == "table":
        print(table(read(sys.argv[2]), read(sys.argv[3])))
    else:
        sys.exit(__doc__)
