#!/usr/bin/env python3
"""Holds tokamak against Hugging Face transformers on small random-init Llama, Qwen2 and Qwen3 models.

For each model: transformers saves it, tokamak loads it (`tokamak grads`) and both compute, on the
same batch, the mean next-token loss, the gradient of every parameter and the logits at every
position (tokamak's through its KV-cache generation path); they must agree to --tol (relative). One
model, llama3.2-rope, has Llama 3.2's RoPE (rope_theta 500000 and its "llama3" rope_scaling block) over
2048 positions and is saved in shards with a model.safetensors.index.json, as the Hub ships it; its
frequencies in transformers are checked against the formula in float64 too. With
--device cuda each error is printed beside the error of transformers itself run in bf16 on the GPU, and
passes when under --tol or at most 1.5x transformers' own bf16 error. Each model is held on a packed, masked batch too
(a fine-tune's: each row several documents, attention within each and positions restarting at its start, the loss
over the targets of a loss mask only; transformers with a block-diagonal 4D mask, position_ids and labels -100):
loss and every gradient. Then the reverse: `tokamak export` of the saved model, loaded by transformers, must hold
the same weights and give the same loss. Needs python3 with torch, transformers and safetensors;
no network.

    python3 tests/hf/compare_hf.py --tokamak build-gpu/tokamak                       # CPU backend, fp32
    python3 tests/hf/compare_hf.py --tokamak build-gpu/tokamak --device cuda --tol 2e-2
"""
import argparse
import copy
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config, Qwen3Config

# initializer_range well above HF's 0.02, so that attention and the softmax are far from uniform.
SHAPE = dict(vocab_size=512, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=160, max_position_embeddings=128, initializer_range=0.1)

# name -> (config class, fields): tied and untied heads, every bias option, Qwen3's free head_dim.
MODELS = {
    "llama": (LlamaConfig, dict(num_hidden_layers=2, tie_word_embeddings=False, rope_theta=10000.0,
                                rms_norm_eps=1e-5)),
    "llama-tied-bias": (LlamaConfig, dict(num_hidden_layers=3, tie_word_embeddings=True, rope_theta=500000.0,
                                          rms_norm_eps=1e-5, attention_bias=True)),
    "qwen2": (Qwen2Config, dict(num_hidden_layers=2, tie_word_embeddings=True, rope_theta=1000000.0,
                                rms_norm_eps=1e-6)),
    "qwen2-untied": (Qwen2Config, dict(num_hidden_layers=3, tie_word_embeddings=False, rope_theta=10000.0,
                                       rms_norm_eps=1e-6)),
    "qwen3": (Qwen3Config, dict(num_hidden_layers=2, tie_word_embeddings=True, rope_theta=1000000.0,
                                rms_norm_eps=1e-6, head_dim=32)),
    "qwen3-untied": (Qwen3Config, dict(num_hidden_layers=3, tie_word_embeddings=False, rope_theta=10000.0,
                                       rms_norm_eps=1e-6, head_dim=32)),
}

# Llama-3.2-1B's rope_scaling block, as its config.json gives it.
LLAMA32_ROPE_SCALING = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                        "original_max_position_embeddings": 8192}
# Llama-3.2-1B's attention (head_dim 64, 4 query heads a key/value head) and RoPE, on a small model. Over 2048
# positions the three bands of the scaling all turn far enough to matter: the low frequencies' angles, divided
# by 32, part from plain RoPE's by radians at the last positions; the blended band's by a fraction of that.
MODELS["llama3.2-rope"] = (LlamaConfig, dict(num_hidden_layers=2, tie_word_embeddings=True, rope_theta=500000.0,
                                             rms_norm_eps=1e-5, hidden_size=256, num_attention_heads=4,
                                             num_key_value_heads=1, head_dim=64, max_position_embeddings=131072,
                                             rope_scaling=LLAMA32_ROPE_SCALING))
# Models with a batch, a save and a tolerance of their own. transformers computes RoPE's angles p * f in
# float32 (an error of the order of p * 2^-24 radians: 1e-4 at p = 2047) where tokamak computes them in
# double, so over 2048 positions the fp32 comparison allows 1e-3; plain RoPE moves the logits by far more
# (check_rope).
SPECIAL = {"llama3.2-rope": dict(batch=(1, 2048), max_shard_size="400KB", tol=1e-3)}

B, T = 2, 33
BF16_EXPORT_TOL = 1e-2  # a bf16 export rounds every weight (2^-9 relative): the loss moves a little


def rope_of(config):
    """(rope_theta, the scaling block or None) where this transformers version keeps them (5.x: rope_parameters)."""
    params = getattr(config, "rope_parameters", None)
    if isinstance(params, dict) and "rope_theta" in params:
        theta, scaling = params["rope_theta"], params
    else:
        theta, scaling = getattr(config, "rope_theta", None), getattr(config, "rope_scaling", None)
    if isinstance(scaling, dict) and scaling.get("rope_type", scaling.get("type", "default")) == "default":
        scaling = None
    return theta, scaling


def make_config(cls, fields):
    """The config, with rope_theta and rope_scaling where this transformers version keeps them."""
    fields = {**SHAPE, **fields}
    theta, scaling = fields["rope_theta"], fields.get("rope_scaling")

    def as_asked(config):
        got_theta, got = rope_of(config)
        if got_theta != theta or (got is None) != (scaling is None):
            return False
        return scaling is None or all(got.get(k) == v for k, v in scaling.items())

    config = cls(**fields)
    if not as_asked(config):
        rest = {k: v for k, v in fields.items() if k not in ("rope_theta", "rope_scaling")}
        config = cls(**rest, rope_parameters={"rope_type": "default", **(scaling or {}), "rope_theta": theta})
    if not as_asked(config):
        raise RuntimeError(f"cannot set rope_theta {theta} and rope_scaling {scaling} in this version's {cls.__name__}")
    return config


def llama3_inv_freq(theta, head_dim, s):
    """transformers' _compute_llama3_parameters, in float64: the frequencies tokamak computes (rope_scaling.cpp)."""
    out = []
    for i in range(head_dim // 2):
        f = theta ** (-2.0 * i / head_dim)
        wavelen = 2 * math.pi / f
        original = s["original_max_position_embeddings"]
        if wavelen > original / s["low_freq_factor"]:
            f = f / s["factor"]
        elif not wavelen < original / s["high_freq_factor"]:
            smooth = (original / wavelen - s["low_freq_factor"]) / (s["high_freq_factor"] - s["low_freq_factor"])
            f = (1 - smooth) * f / s["factor"] + smooth * f
        out.append(f)
    return torch.tensor(out, dtype=torch.float64)


def check_rope(name, model, fields, tokens, tol, report):
    """transformers' scaled frequencies against the formula, and that the scaling matters at these positions:
    the same weights with plain RoPE must give logits 10x further from them than the fp32 tolerance `tol`."""
    head_dim = fields["head_dim"]
    inv_freq = model.model.rotary_emb.inv_freq.double()
    report.check(name, "transformers' inv_freq against llama3 formula (f64)",
                 rel(inv_freq, llama3_inv_freq(fields["rope_theta"], head_dim, fields["rope_scaling"])), 1e-6)
    plain = load_model(make_config(LlamaConfig, {k: v for k, v in fields.items() if k != "rope_scaling"}))
    plain.load_state_dict(model.state_dict())
    with torch.no_grad():
        _, scaled_logits = hf_loss(model, tokens, backward=False)
        _, plain_logits = hf_loss(plain, tokens, backward=False)
    moved = rel(plain_logits, scaled_logits)
    print(f"  plain RoPE instead of llama3 scaling moves the logits by {moved:.3e} (must exceed 10x {tol:g})")
    if not moved > 10 * tol:
        report.failures.append(f"{name}: the scaling moves the logits by only {moved:.3e}: the comparison cannot see it")


def load_model(source):
    """float32, eager attention: the plain reference computation."""
    if isinstance(source, str):
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32, attn_implementation="eager")
    else:
        model = AutoModelForCausalLM.from_config(source, attn_implementation="eager").float()
    return model.eval()


def randomise_norms_and_biases(model, gen):
    """HF initialises norms to one and biases to zero; values away from those exercise every term."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))


def hf_loss(model, tokens, backward):
    """The mean loss over targets tokens[:, 1:] and the logits [B, T, V]."""
    logits = model(input_ids=tokens[:, :-1]).logits.float()
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
    if backward:
        loss.backward()
    return loss.item(), logits.detach()


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return r


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


class Report:
    def __init__(self):
        self.failures = []

    def check(self, model, what, err, tol, peer=None):
        # Against fp32: within tol, or (bf16 on the GPU) no worse than transformers' own bf16 run, with a
        # margin for the different but equally valid rounding order of fused kernels.
        bound = max(tol, 1.5 * peer) if peer is not None else tol
        ok = err < bound and err == err  # NaN fails
        extra = f"   transformers bf16: {peer:10.3e}" if peer is not None else ""
        print(f"  {what:<52} {err:10.3e}  {'ok' if ok else 'FAIL'}{extra}")
        if not ok:
            self.failures.append(f"{model}: {what} rel err {err:.3e} >= {tol:.1e}")


def bf16_reference(model, tokens):
    """transformers itself in bf16 on the GPU (SDPA attention): how far a bf16 run of the same model
    lands from the fp32 reference, the scale against which tokamak's bf16 errors are read."""
    m = copy.deepcopy(model).to("cuda", torch.bfloat16)
    m.config._attn_implementation = "sdpa"
    loss, logits = hf_loss(m, tokens.cuda(), backward=True)
    grads = {n: p.grad.float().cpu() for n, p in m.named_parameters()}
    return loss, logits.cpu(), grads


def compare_gradients(name, model, tokens, tk_out, tol, report, bf16_peer=False):
    loss_hf, logits_hf = hf_loss(model, tokens, backward=True)
    peer = bf16_reference(model, tokens) if bf16_peer else None
    got = load_file(tk_out)
    loss_tk = got.pop("loss").item()
    print(f"  loss: transformers {loss_hf:.6f}  tokamak {loss_tk:.6f}"
          + (f"  transformers bf16 {peer[0]:.6f}" if peer else ""))
    report.check(name, "loss", abs(loss_tk - loss_hf) / abs(loss_hf), tol,
                 abs(peer[0] - loss_hf) / abs(loss_hf) if peer else None)
    report.check(name, "logits (tokamak: KV-cache path)", rel(got.pop("logits"), logits_hf), tol,
                 rel(peer[1], logits_hf) if peer else None)
    for pname, p in model.named_parameters():
        if pname not in got:
            report.failures.append(f"{name}: tokamak wrote no gradient for {pname}")
            print(f"  {pname:<52} {'missing':>10}  FAIL")
            continue
        g_tk = got.pop(pname)
        if tuple(g_tk.shape) != tuple(p.grad.shape):
            report.failures.append(f"{name}: {pname} gradient shape {tuple(g_tk.shape)} vs {tuple(p.grad.shape)}")
            continue
        report.check(name, pname, rel(g_tk, p.grad), tol, rel(peer[2][pname], p.grad) if peer else None)
    for extra in got:
        report.failures.append(f"{name}: tokamak wrote a gradient for {extra}, which transformers does not have")
    return loss_hf


def packed_masked_batch(tokens, gen):
    """Each row cut into documents at random starts, each document's first half left out of the loss (its prompt):
    a packed fine-tuning batch. Returns the starts and the 0/1 flags of the targets, per row."""
    rows, length = tokens.shape[0], tokens.shape[1] - 1
    documents, trained = [], []
    for _ in range(rows):
        cuts = sorted(set(torch.randint(2, length - 1, (3,), generator=gen).tolist()))
        starts = [0] + cuts
        flags = []
        for s, e in zip(starts, starts[1:] + [length]):
            prompt = (e - s) // 2
            flags += [0] * prompt + [1] * (e - s - prompt)
        documents.append(starts)
        trained.append(flags)
    return documents, trained


def hf_packed_masked_loss(model, tokens, documents, trained, device="cpu"):
    """transformers on the packed batch: a 4D additive mask allowing each position its own document's earlier
    positions, position_ids restarting at each document, labels -100 where the loss mask leaves a target out."""
    rows, length = tokens.shape[0], tokens.shape[1] - 1
    positions = torch.zeros(rows, length, dtype=torch.long)
    segments = torch.zeros(rows, length, dtype=torch.long)
    for b, starts in enumerate(documents):
        for i, (s, e) in enumerate(zip(starts, starts[1:] + [length])):
            positions[b, s:e] = torch.arange(e - s)
            segments[b, s:e] = i
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    allowed = (segments[:, :, None] == segments[:, None, :]) & causal
    mask = torch.zeros(rows, 1, length, length)
    mask.masked_fill_(~allowed[:, None], torch.finfo(torch.float32).min)
    labels = tokens[:, 1:].clone()
    labels[torch.tensor(trained) == 0] = -100
    mask, positions, labels, tokens = (x.to(device) for x in (mask, positions, labels, tokens))
    logits = model(input_ids=tokens[:, :-1], attention_mask=mask.to(next(model.parameters()).dtype),
                   position_ids=positions).logits.float()
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
    loss.backward()
    return loss.item()


def compare_packed_masked(name, args, hf_dir, work, tokens, gen, tol, report):
    documents, trained = packed_masked_batch(tokens, gen)
    batch_json = os.path.join(work, "packed.json")
    with open(batch_json, "w") as f:
        json.dump({"tokens": tokens.tolist(), "documents": documents, "trained": trained}, f)
    tk_out = os.path.join(work, "packed.safetensors")
    run([args.tokamak, "grads", "--model", hf_dir, "--tokens", batch_json, "--out", tk_out, "--device", args.device])
    model = load_model(hf_dir)
    loss_hf = hf_packed_masked_loss(model, tokens, documents, trained)
    peer = None  # on the GPU: transformers itself in bf16, the scale tokamak's bf16 errors are read against
    if args.device == "cuda" and torch.cuda.is_available():
        m = copy.deepcopy(model).to("cuda", torch.bfloat16)
        m.config._attn_implementation = "sdpa"
        peer_loss = hf_packed_masked_loss(m, tokens, documents, trained, "cuda")
        peer = (abs(peer_loss - loss_hf) / abs(loss_hf),
                {n: rel(q.grad.float().cpu(), dict(model.named_parameters())[n].grad) for n, q in m.named_parameters()})
    got = load_file(tk_out)
    loss_tk = got.pop("loss").item()
    print(f"  packed and masked ({sum(map(sum, trained))} of {tokens.numel() - tokens.shape[0]} targets trained): "
          f"loss transformers {loss_hf:.6f}  tokamak {loss_tk:.6f}")
    report.check(name, "packed, masked: loss", abs(loss_tk - loss_hf) / abs(loss_hf), tol, peer[0] if peer else None)
    for pname, p in model.named_parameters():
        if pname not in got:
            report.failures.append(f"{name}: packed, masked: tokamak wrote no gradient for {pname}")
            continue
        report.check(name, f"packed, masked: {pname}", rel(got[pname], p.grad), tol, peer[1][pname] if peer else None)


def compare_export(name, args, hf_dir, work, tokens, loss_hf, report):
    """tokamak export -> transformers: f32 holds the very same weights and loss; bf16 close to them."""
    reference = load_model(hf_dir).state_dict()
    for dtype, tol in (("f32", 1e-6), ("bf16", BF16_EXPORT_TOL)):
        out = os.path.join(work, f"export-{dtype}")
        run([args.tokamak, "export", "--checkpoint", hf_dir, "--out", out, "--dtype", dtype])
        exported = load_model(out)
        with torch.no_grad():
            loss, _ = hf_loss(exported, tokens, backward=False)
        report.check(name, f"export {dtype}: loss in transformers", abs(loss - loss_hf) / abs(loss_hf), tol)
        state = exported.state_dict()
        worst = max(rel(state[k], v) for k, v in reference.items() if v.norm() > 0)
        report.check(name, f"export {dtype}: worst weight", worst, 1e-30 if dtype == "f32" else 4e-3)


def compare_model(name, args, work, report):
    cls, fields = MODELS[name]
    special = SPECIAL.get(name, {})
    gen = torch.Generator().manual_seed(args.seed)
    torch.manual_seed(args.seed)
    model = load_model(make_config(cls, fields))
    randomise_norms_and_biases(model, gen)
    hf_dir = os.path.join(work, "hf")
    if "max_shard_size" in special:
        model.save_pretrained(hf_dir, max_shard_size=special["max_shard_size"])
        shards = [f for f in os.listdir(hf_dir) if f.endswith(".safetensors")]
        if not os.path.exists(os.path.join(hf_dir, "model.safetensors.index.json")) or len(shards) < 2:
            raise RuntimeError(f"save_pretrained wrote {shards}, not shards with an index")
        print(f"  saved in {len(shards)} shards with model.safetensors.index.json")
    else:
        model.save_pretrained(hf_dir)

    batch, length = special.get("batch", (B, T))
    tol = max(args.tol, special.get("tol", 0.0))
    tokens = torch.randint(0, SHAPE["vocab_size"], (batch, length + 1), generator=gen)
    if "rope_scaling" in fields:
        check_rope(name, model, {**SHAPE, **fields}, tokens, special.get("tol", args.tol), report)
    tokens_json = os.path.join(work, "tokens.json")
    with open(tokens_json, "w") as f:
        json.dump({"tokens": tokens.tolist()}, f)
    tk_out = os.path.join(work, "grads.safetensors")
    run([args.tokamak, "grads", "--model", hf_dir, "--tokens", tokens_json, "--out", tk_out, "--device", args.device])

    bf16_peer = args.device == "cuda" and torch.cuda.is_available()
    loss_hf = compare_gradients(name, model, tokens, tk_out, tol, report, bf16_peer)
    if length <= 64:  # the 4D mask of the long-context model would be large, and packing adds nothing to its RoPE check
        compare_packed_masked(name, args, hf_dir, work, tokens, gen, tol, report)
    compare_export(name, args, hf_dir, work, tokens, loss_hf, report)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokamak", default="build-gpu/tokamak", help="path to the tokamak binary")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="tokamak's backend")
    ap.add_argument("--tol", type=float, default=1e-4, help="relative tolerance for loss and gradients")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated subset of " + ", ".join(MODELS))
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--keep", metavar="DIR", help="keep the models, batches and gradients under DIR")
    args = ap.parse_args()
    if not os.access(args.tokamak, os.X_OK):
        sys.exit(f"error: {args.tokamak} is not an executable tokamak binary (--tokamak PATH)")
    args.tokamak = os.path.abspath(args.tokamak)
    names = [m for m in args.models.split(",") if m]
    unknown = [m for m in names if m not in MODELS]
    if unknown:
        sys.exit(f"error: unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")

    if args.device == "cuda":
        # CUDA attention wants head_dim >= 32 (cuDNN, and the decode kernel of the logits path).
        SHAPE.update(hidden_size=128, intermediate_size=320)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}; tokamak {args.tokamak} "
          f"--device {args.device}; tolerance {args.tol:g}; batch [{B}, {T}+1] unless the model says otherwise")
    root = args.keep or tempfile.mkdtemp(prefix="tk_compare_hf_")
    report = Report()
    try:
        for name in names:
            print(f"\n{name}")
            work = os.path.join(root, name)
            shutil.rmtree(work, ignore_errors=True)
            os.makedirs(work)
            try:
                compare_model(name, args, work, report)
            except Exception as e:  # one model's failure is reported, the others still run
                report.failures.append(f"{name}: {e}")
                print(f"  FAIL: {e}")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)

    print()
    for f in report.failures:
        print(f"FAIL {f}")
    print(f"{'PASS' if not report.failures else 'FAIL'}: {len(names)} models, "
          f"{len(report.failures)} failure(s), tolerance {args.tol:g}, device {args.device}")
    sys.exit(1 if report.failures else 0)


if __name__ == "__main__":
    main()
