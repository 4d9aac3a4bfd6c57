"""Joins the peer's rows (bench/torch_peer.py) and tokamak's (`tokamak bench --json`), JSON lines, by config and
prints a markdown table: tokens/s, MFU, peak memory, and for each tokamak row its ratio to the compiled bf16 peer
(torch.compile) and to the fastest FP8 peer (torchao float8 training, tensorwise or rowwise) of the same config.
Only single-GPU peer rows enter the ratios. Usage: compare.py PEER.jsonl TOKAMAK.jsonl"""
import json
import sys


def rows(path):
    out = []
    try:
        for line in open(path):
            line = line.strip()
            if line.startswith("{"):
                out.append(json.loads(line))
    except FileNotFoundError:
        pass
    return out


def ratio(mine, peer):
    return f"{mine['tok_s'] / peer['tok_s']:.2f}x" if peer else "–"


def peer_name(p):
    name = f"torch {p['mode']}"
    if p.get("gpus", 1) > 1:
        name += f", {p['gpus']} GPUs {p.get('dist', '')}".rstrip()
    if p.get("attention"):
        name += f" ({p['attention']} attention)"
    return name


peer, tk = rows(sys.argv[1]), rows(sys.argv[2])
ceil = next((r for r in peer if "bf16_matmul_tflops" in r), None)
if ceil:
    print(f"ceilings: {ceil['bf16_matmul_tflops']} TFLOP/s bf16 GEMM, {ceil['copy_tb_s']} TB/s copy "
          f"({ceil['gpu']}, torch {ceil['torch']})\n")
print("| config | engine | tok/s | MFU | peak GiB | vs torch.compile | vs best FP8 peer |")
print("|---|---|---|---|---|---|---|")
configs = list(dict.fromkeys([t.get("config") for t in tk] + [p.get("config") for p in peer if "config" in p]))
for c in configs:
    peers = [p for p in peer if p.get("config") == c]
    single = [p for p in peers if "error" not in p and p.get("gpus", 1) == 1]
    compiled = next((p for p in single if p["mode"] == "compile"), None)
    fp8 = max((p for p in single if p["mode"].startswith("compile-fp8")), key=lambda p: p["tok_s"], default=None)
    for t in (t for t in tk if t.get("config") == c):
        name = t.get("engine", "tokamak")
        if "error" in t:
            print(f"| {c} | {name} | error: {t['error']} | | | | |")
        else:
            print(f"| {c} | {name} | {t['tok_s']:,} | {t['mfu']:.1%} | {t['peak_mem_gib']} | {ratio(t, compiled)} | "
                  f"{ratio(t, fp8)}{' (' + fp8['mode'] + ')' if fp8 else ''} |")
    for p in peers:
        if "error" in p:
            print(f"| {c} | {peer_name(p)} | error: {p['error'][:120]} | | | | |")
        else:
            print(f"| {c} | {peer_name(p)} | {p['tok_s']:,} | {p['mfu_datasheet']:.1%} | {p['peak_mem_gib']} | | |")
