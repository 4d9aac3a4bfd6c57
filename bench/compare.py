"""Joins the peer's and tokamak's benchmark rows (JSON lines) by config and prints a markdown table
with tokens/s, MFU, peak memory and tokamak's ratio to each peer mode."""
import json, sys


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


peer, tk = rows(sys.argv[1]), rows(sys.argv[2])
ceil = next((r for r in peer if "bf16_matmul_tflops" in r), None)
if ceil:
    print(f"ceilings: {ceil['bf16_matmul_tflops']} TFLOP/s bf16 GEMM, {ceil['copy_tb_s']} TB/s copy ({ceil['gpu']}, torch {ceil['torch']})\n")
print("| config | engine | tok/s | MFU | peak GiB | tokamak / engine |")
print("|---|---|---|---|---|---|")
configs = list(dict.fromkeys(t.get("config") for t in tk))
for c in configs:
    mine = [t for t in tk if t.get("config") == c]
    ok = [t for t in mine if "error" not in t]
    for t in mine:
        name = t.get("engine", "tokamak")
        if "error" in t:
            print(f"| {c} | {name} | error: {t['error']} | | | |")
        else:
            print(f"| {c} | {name} | {t['tok_s']:,} | {t['mfu']:.1%} | {t['peak_mem_gib']} | |")
    for p in peer:
        if p.get("config") != c:
            continue
        if "error" in p:
            print(f"| {c} | torch {p['mode']} | error | | | |")
            continue
        ratios = ", ".join(f"{t['tok_s'] / p['tok_s']:.2f}x" + (f" ({t['engine']})" if len(ok) > 1 else "") for t in ok)
        print(f"| {c} | torch {p['mode']} | {p['tok_s']:,} | {p['mfu_datasheet']:.1%} | {p['peak_mem_gib']} | {ratios} |")
