"""Joins the peer's rows (bench/torch_peer.py) and tokamak's (`tokamak bench --json`), JSON lines, by config and
prints a markdown table: tokens/s, MFU, peak memory, and for each tokamak row its ratio to the compiled bf16 peer
(torch.compile) and to the fastest FP8 peer (torchao float8 training, tensorwise or rowwise) of the same config.
Only single-GPU peer rows enter the ratios. Usage: compare.py PEER.jsonl TOKAMAK.jsonl
compare.py --fp8-peer-memory CONFIG PEER.jsonl prints the peak GiB of that fastest FP8 peer (nothing without one):
bench/run.sh's budget for tokamak's runs within the peer's memory."""
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


def share(x):
    return f"{x:.1%}" if x is not None else "–"


def ratio(mine, peer):
    return f"{mine['tok_s'] / peer['tok_s']:.2f}x" if peer else "–"


def peer_name(p):
    name = f"torch {p['mode']}"
    if p.get("compile_scope") == "block":
        name += " per block"
    if p.get("gpus", 1) > 1:
        name += f", {p['gpus']} GPUs {p.get('dist', '')}".rstrip()
    if p.get("attention"):
        name += f" ({p['attention']} attention)"
    return name


def single_gpu(peer, config):
    return [p for p in peer if p.get("config") == config and "error" not in p and p.get("gpus", 1) == 1]


def fastest_fp8_peer(peer, config):
    return max((p for p in single_gpu(peer, config) if p["mode"].startswith("compile-fp8")), key=lambda p: p["tok_s"],
               default=None)


if sys.argv[1] == "--fp8-peer-memory":
    fastest = fastest_fp8_peer(rows(sys.argv[3]), sys.argv[2])
    if fastest:
        print(fastest["peak_mem_gib"])
    sys.exit(0)

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
    compiled = next((p for p in single_gpu(peer, c) if p["mode"] == "compile"), None)
    fp8 = fastest_fp8_peer(peer, c)
    for t in (t for t in tk if t.get("config") == c):
        name = t.get("engine", "tokamak")
        if "error" in t:
            print(f"| {c} | {name} | error: {t['error']} | | | | |")
        else:
            print(f"| {c} | {name} | {t['tok_s']:,} | {share(t.get('mfu'))} | {t['peak_mem_gib']} | {ratio(t, compiled)} | "
                  f"{ratio(t, fp8)}{' (' + fp8['mode'] + ')' if fp8 else ''} |")
    for p in peers:
        if "error" in p:
            print(f"| {c} | {peer_name(p)} | error: {p['error'][:120]} | | | | |")
        else:
            print(f"| {c} | {peer_name(p)} | {p['tok_s']:,} | {share(p.get('mfu_datasheet'))} | {p['peak_mem_gib']} | | |")
