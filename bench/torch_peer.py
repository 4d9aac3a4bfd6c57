#!/usr/bin/env python3
"""The PyTorch peer of bench/run.sh: tokamak's preset shapes trained the way PyTorch users train them, so that
tokamak's tokens/s, MFU and memory are compared with a measured reference on the same machine, in the same call.

Every mode: fp32 weights (the master weights) under bf16 autocast, fused AdamW, causal attention through
scaled_dot_product_attention (the backend PyTorch picks, recorded in each row; --attention flash forces
FlashAttention), the logits' cross-entropy in fp32, random tokens, micro-batch 8 x 2048 (16 x 1024 for
gpt2-small-llama) unless --batch and --seq say otherwise. The architecture follows the preset: Qwen2.5 has q/k/v
biases, Qwen3 (a config.json path) q/k norms, and the embedding is tied to the LM head where the preset ties it.

Modes (--modes, comma-separated):
  eager                the model as written
  compile              torch.compile (with --dist fsdp: each block compiled, as FSDP2 asks)
  compile-ckpt         compile with every block's activations recomputed in the backward (torch.utils.checkpoint)
  compile-fp8          compile with torchao's float8 training: every linear but the LM head in FP8 (e4m3 forward,
                       e5m2 gradients), one dynamic scale per tensor ("tensorwise", torchao's default)
  compile-fp8-rowwise  the same with one scale per row ("rowwise"; inductor's emulate_precision_casts on)
  hf, hf-compile       the transformers model of the same architecture, with its SDPA attention
What one torch.compile takes (--compile-scope): the whole model (default), or each block and the tail (final norm,
LM head, loss) apart, as torchtitan compiles: the blocks share one graph, so compiling takes a fraction of the time
(8 s against 32-75 s at 0.5B), but the steps ran 1.6-2.5% slower there (bench/NOTES.md).
The FP8 modes need torchao: its Python sources are enough (no compiled ops). TORCHAO_PATH, default .shared/torchao
under the repository root, is put on sys.path; --check-torchao says whether it imports (exit status 0 or 1).

Several GPUs: --gpus N starts N processes on this host (torch.distributed.run), or launch under torchrun
yourself. Each GPU takes a whole micro-batch; --dist ddp (DistributedDataParallel) or fsdp (FSDP2's fully_shard,
one unit a block, bf16 parameters in compute and fp32 gradient reduction), or both ("ddp,fsdp").

Output, one JSON line per result (bench/compare.py reads them): first the ceilings (an 8192^3 bf16 GEMM, a 4 GiB
device copy counting bytes read and written), then per config, mode and --dist: tok_s (all GPUs), mfu_datasheet
(per GPU: the FLOPs of docs/design.md over 989e12, the dense bf16 peak of an H100/H200 SXM), peak_mem_gib (rank 0),
step_ms and the settings; a row with "error" where a run failed (out of memory, torchao missing), then the next.

Usage (on the GPU machine; needs torch):
  python3 bench/torch_peer.py --configs qwen2.5-0.5b,llama3.2-1b --modes compile,compile-fp8,compile-fp8-rowwise
  python3 bench/torch_peer.py --configs llama3.1-8b --seq 8192 --batch 1 --modes compile-ckpt
  python3 bench/torch_peer.py --configs llama3.2-1b --modes compile --gpus 2 --dist ddp,fsdp --no-ceilings
"""
import argparse
import dataclasses
import gc
import json
import os
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEAK_BF16 = 989e12  # dense bf16 with fp32 accumulation, H100/H200 SXM datasheet


@dataclasses.dataclass(frozen=True)
class Shape:
    arch: str  # llama, qwen2 or qwen3
    vocab: int
    d_model: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    tied: bool
    rope_theta: float
    norm_eps: float
    qkv_bias: bool = False  # biases on the q, k and v projections (Qwen2)
    o_bias: bool = False    # a bias on the output projection (Llama's and Qwen3's attention_bias)
    qk_norm: bool = False   # RMSNorm of each head's q and k before RoPE (Qwen3)


def preset(arch, vocab, d, layers, heads, kv_heads, head_dim, ffn, rope_theta, eps, tied):
    return Shape(arch, vocab, d, layers, heads, kv_heads, head_dim, ffn, tied, rope_theta, eps,
                 qkv_bias=arch == "qwen2", qk_norm=arch == "qwen3")


# tokamak's presets (src/model/config.cpp), field for field.
PRESETS = {
    "tiny": preset("llama", 50257, 256, 4, 4, 2, 64, 704, 10000.0, 1e-5, True),
    "gpt2-small-llama": preset("llama", 50304, 768, 12, 12, 12, 64, 2048, 10000.0, 1e-5, True),
    "qwen2.5-0.5b": preset("qwen2", 151936, 896, 24, 14, 2, 64, 4864, 1e6, 1e-6, True),
    "llama3.2-1b": preset("llama", 128256, 2048, 16, 32, 8, 64, 8192, 500000.0, 1e-5, True),
    "qwen2.5-1.5b": preset("qwen2", 151936, 1536, 28, 12, 2, 128, 8960, 1e6, 1e-6, True),
    "llama3.2-3b": preset("llama", 128256, 3072, 28, 24, 8, 128, 8192, 500000.0, 1e-5, True),
    "qwen2.5-7b": preset("qwen2", 152064, 3584, 28, 28, 4, 128, 18944, 1e6, 1e-6, False),
    "llama3.1-8b": preset("llama", 128256, 4096, 32, 32, 8, 128, 14336, 500000.0, 1e-5, False),
}
# Names earlier peer commands used.
ALIASES = {"gpt2s-llama": "gpt2-small-llama", "llama-3b": "llama3.2-3b"}
# (micro-batch, sequence) where it is not 8 x 2048; bench/run.sh gives tokamak the same.
MICRO_BATCH = {"gpt2-small-llama": (16, 1024)}

HF_ARCHS = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3"}


def shape_from_hf_config(path):
    """A Hugging Face config.json of a Llama, Qwen2 or Qwen3 model, read as tokamak reads it."""
    with open(path) as f:
        c = json.load(f)
    arch = HF_ARCHS.get((c.get("architectures") or [""])[0]) or c.get("model_type")
    if arch not in ("llama", "qwen2", "qwen3"):
        raise SystemExit(f"{path}: not a Llama, Qwen2 or Qwen3 config")
    heads = c["num_attention_heads"]
    bias = bool(c.get("attention_bias", False))
    return Shape(arch, c["vocab_size"], c["hidden_size"], c["num_hidden_layers"], heads,
                 c.get("num_key_value_heads", heads), c.get("head_dim") or c["hidden_size"] // heads,
                 c["intermediate_size"], bool(c.get("tie_word_embeddings", False)), float(c.get("rope_theta", 10000.0)),
                 float(c.get("rms_norm_eps", 1e-6)), qkv_bias=arch == "qwen2" or bias,
                 o_bias=arch != "qwen2" and bias, qk_norm=arch == "qwen3")


def resolve_config(name):
    """(name, Shape, default micro-batch, default sequence) of a preset name or a config.json path."""
    name = ALIASES.get(name, name)
    if name in PRESETS:
        return (name, PRESETS[name], *MICRO_BATCH.get(name, (8, 2048)))
    if os.path.isfile(name):
        return (os.path.basename(os.path.dirname(os.path.abspath(name))) or name, shape_from_hf_config(name), 8, 2048)
    raise SystemExit(f"unknown config {name!r}: a preset ({', '.join(PRESETS)}) or a config.json path")


def model_flops_per_token(s, seq):
    """docs/design.md: 6 FLOPs a token for each matmul weight (the LM head once, the embedding lookup not) and
    6 L T q for causal attention, forward and backward."""
    q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
    n_matmul = s.layers * (s.d_model * q + 2 * s.d_model * kv + q * s.d_model + 3 * s.d_model * s.ffn)
    n_matmul += s.d_model * s.vocab
    return 6 * n_matmul + 6 * s.layers * seq * q


# ---- the model ----------------------------------------------------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, width, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x):
        # Normalised in fp32, then back to the input's precision before the weight, as transformers' Llama does.
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def rotary_tables(head_dim, seq, theta):
    """cos and sin [1, 1, seq, head_dim] of the rotate-half form of RoPE."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq, dtype=torch.float32), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos()[None, None], angles.sin()[None, None]


def rotate(x, cos, sin):
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-second, first), dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = s.heads, s.kv_heads, s.head_dim
        self.widths = [s.heads * s.head_dim, s.kv_heads * s.head_dim, s.kv_heads * s.head_dim]
        self.qkv = nn.Linear(s.d_model, sum(self.widths), bias=s.qkv_bias)  # q, k and v in one GEMM
        self.out = nn.Linear(self.widths[0], s.d_model, bias=s.o_bias)
        self.q_norm = RMSNorm(s.head_dim, s.norm_eps) if s.qk_norm else None
        self.k_norm = RMSNorm(s.head_dim, s.norm_eps) if s.qk_norm else None

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q, k, v = self.qkv(x).split(self.widths, dim=-1)
        q = q.view(B, T, self.heads, self.head_dim)
        k = k.view(B, T, self.kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q = rotate(q.transpose(1, 2), cos, sin)
        k = rotate(k.transpose(1, 2), cos, sin)
        v = v.view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv_heads != self.heads)
        return self.out(y.transpose(1, 2).reshape(B, T, self.widths[0]))


class SwiGLU(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.gate_up = nn.Linear(s.d_model, 2 * s.ffn, bias=False)  # gate and up in one GEMM
        self.down = nn.Linear(s.ffn, s.d_model, bias=False)

    def forward(self, x):
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.attn_norm, self.attn = RMSNorm(s.d_model, s.norm_eps), Attention(s)
        self.mlp_norm, self.mlp = RMSNorm(s.d_model, s.norm_eps), SwiGLU(s)

    def forward(self, h, cos, sin):
        h = h + self.attn(self.attn_norm(h), cos, sin)
        return h + self.mlp(self.mlp_norm(h))


class Decoder(nn.Module):
    """Embedding, blocks, final norm, LM head; forward returns the mean cross-entropy of the next tokens."""

    def __init__(self, s, seq, recompute):
        super().__init__()
        self.embed = nn.Embedding(s.vocab, s.d_model)
        self.blocks = nn.ModuleList(Block(s) for _ in range(s.layers))
        self.norm = RMSNorm(s.d_model, s.norm_eps)
        self.lm_head = nn.Linear(s.d_model, s.vocab, bias=False)
        if s.tied:
            self.lm_head.weight = self.embed.weight
        cos, sin = rotary_tables(s.head_dim, seq, s.rope_theta)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.recompute = recompute

    def forward(self, tokens, targets):
        h = self.embed(tokens)
        # The rotation in the residual stream's precision (fp32 under autocast), as transformers computes it.
        cos, sin = self.cos.to(h.dtype), self.sin.to(h.dtype)
        for block in self.blocks:
            if self.recompute:
                h = torch.utils.checkpoint.checkpoint(block, h, cos, sin, use_reentrant=False)
            else:
                h = block(h, cos, sin)
        return self.tail(h, targets)

    def tail(self, h, targets):
        """The final norm, the LM head and the loss: what --compile-scope block compiles beside the blocks."""
        logits = self.lm_head(self.norm(h))
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


def hf_decoder(s, seq):
    """The transformers model of the shape's architecture and a forward with tokamak's loss arguments."""
    import transformers
    kwargs = dict(vocab_size=s.vocab, hidden_size=s.d_model, intermediate_size=s.ffn, num_hidden_layers=s.layers,
                  num_attention_heads=s.heads, num_key_value_heads=s.kv_heads, head_dim=s.head_dim,
                  max_position_embeddings=seq, rope_theta=s.rope_theta, rms_norm_eps=s.norm_eps,
                  tie_word_embeddings=s.tied, attn_implementation="sdpa")
    if s.arch == "llama":
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(attention_bias=s.o_bias, **kwargs))
    elif s.arch == "qwen2":
        model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**kwargs))
    else:
        model = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(attention_bias=s.o_bias, **kwargs))

    def loss(tokens, targets):
        # transformers shifts the labels itself: the inputs are the labels, the last target is unused.
        return model(input_ids=tokens, labels=tokens).loss

    return model, loss


# ---- FP8 through torchao ------------------------------------------------------------------------------------

FP8_RECIPES = {"compile-fp8": "tensorwise", "compile-fp8-rowwise": "rowwise"}


def torchao_path():
    return os.path.abspath(os.environ.get("TORCHAO_PATH", os.path.join(REPO, ".shared", "torchao")))


def import_torchao_float8():
    """torchao.float8 from TORCHAO_PATH (or an installed torchao); an ImportError says which was tried."""
    path = torchao_path()
    if os.path.isdir(path) and path not in sys.path:
        sys.path.insert(0, path)
    try:
        import torchao.float8
    except ImportError as e:
        raise ImportError(f"torchao cannot be imported (TORCHAO_PATH {path}): {e}") from e
    return torchao.float8


def convert_to_fp8(model, recipe):
    float8 = import_torchao_float8()

    def takes_fp8(module, fqn):
        # Every linear but the LM head, where both dimensions suit the FP8 GEMMs (multiples of 16).
        return fqn != "lm_head" and module.in_features % 16 == 0 and module.out_features % 16 == 0

    float8.convert_to_float8_training(model, config=float8.Float8LinearConfig.from_recipe_name(recipe),
                                      module_filter_fn=takes_fp8)


# ---- one measurement ----------------------------------------------------------------------------------------


class Distributed:
    def __init__(self):
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))


def sdpa_backend_name(s, seq):
    """The SDPA backend PyTorch picks for this shape's attention under the current settings."""
    names = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn"}
    q = torch.empty(1, s.heads, seq, s.head_dim, device="cuda", dtype=torch.bfloat16)
    kv = torch.empty(1, s.kv_heads, seq, s.head_dim, device="cuda", dtype=torch.bfloat16)
    try:
        choice = int(torch._fused_sdp_choice(q, kv, kv, is_causal=True, enable_gqa=s.kv_heads != s.heads))
    except (AttributeError, RuntimeError, TypeError):
        return "unknown"
    return names.get(choice, f"backend {choice}")


def build(s, seq, mode, dist, dist_mode, compile_scope):
    """The model on this GPU, ready for the mode and the distribution: (module, loss function)."""
    if mode.startswith("hf"):
        model, loss_fn = hf_decoder(s, seq)
        model = model.cuda()
    else:
        with torch.device("cuda"):
            model = Decoder(s, seq, recompute=mode == "compile-ckpt")
        if mode in FP8_RECIPES:
            convert_to_fp8(model, FP8_RECIPES[mode])
        loss_fn = model
    compiled = "compile" in mode
    if dist.world > 1 and dist_mode == "fsdp":
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        blocks = model.model.layers if mode.startswith("hf") else model.blocks
        for block in blocks:
            if compiled:
                block.compile()  # per block: FSDP2's hooks stay outside the compiled graphs
            fully_shard(block, mp_policy=policy)
        fully_shard(model, mp_policy=policy)
        return model, loss_fn
    if compiled and compile_scope == "block" and not mode.startswith("hf"):
        # torchtitan's way: one graph for a block, which every block runs (their weights are its inputs), and one
        # for the tail; the embedding's gather stays eager. Compiles in a fraction of the whole model's time.
        for block in model.blocks:
            block.compile()
        model.tail = torch.compile(model.tail)
        compiled = False
    if dist.world > 1:
        ddp = nn.parallel.DistributedDataParallel(model, device_ids=[dist.local_rank])
        loss_fn = ddp if not mode.startswith("hf") else (lambda tokens, targets: ddp(input_ids=tokens, labels=tokens).loss)
    return model, (torch.compile(loss_fn) if compiled else loss_fn)


def time_steps(step, steps):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(steps):
        loss = step(i)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / steps, loss


def measure(name, s, batch, seq, mode, dist, dist_mode, compile_scope, steps, warm):
    torch._dynamo.reset()  # fresh graphs for every run, clear of the recompile limit
    torch.manual_seed(0)
    model, loss_fn = build(s, seq, mode, dist, dist_mode, compile_scope)
    params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    gen = torch.Generator(device="cuda").manual_seed(1 + dist.rank)
    batches = [torch.randint(0, s.vocab, (batch, seq + 1), device="cuda", generator=gen) for _ in range(4)]

    def step(i):
        tokens = batches[i % len(batches)]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(tokens[:, :-1], tokens[:, 1:].contiguous())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    t0 = time.time()
    for i in range(warm):
        step(i)
    torch.cuda.synchronize()
    warm_s = time.time() - t0
    torch.cuda.reset_peak_memory_stats()
    if dist.world > 1:
        torch.distributed.barrier()
    step_ms, loss = time_steps(step, steps)
    tokens_per_step = dist.world * batch * seq
    tok_s = tokens_per_step / (step_ms / 1e3)
    flops = model_flops_per_token(s, seq) * tok_s
    return dict(config=name, mode=mode, gpus=dist.world, dist=dist_mode if dist.world > 1 else "none",
                compile_scope=compile_scope if "compile" in mode else None, attention=sdpa_backend_name(s, seq),
                params=params, batch=batch, seq=seq,
                tokens_per_step=tokens_per_step, step_ms=round(step_ms, 2), tok_s=round(tok_s),
                tflops=round(flops / 1e12, 1), mfu_datasheet=round(flops / dist.world / PEAK_BF16, 3),
                peak_mem_gib=round(torch.cuda.max_memory_allocated() / 2**30, 1), warm_s=round(warm_s, 1),
                loss=round(float(loss.item()), 3))


def measure_ceilings():
    """An 8192^3 bf16 GEMM and a 4 GiB device copy (bytes read + written), as tokamak's profile measures them."""
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn_like(a)
    for _ in range(3):
        torch.mm(a, b)
    gemm_ms, _ = time_steps(lambda i: torch.mm(a, b), 20)
    src = torch.empty(1 << 30, device="cuda", dtype=torch.float32).normal_()
    dst = torch.empty_like(src)
    dst.copy_(src)
    copy_ms, _ = time_steps(lambda i: dst.copy_(src), 10)
    row = dict(bf16_matmul_tflops=round(2 * n**3 / (gemm_ms / 1e3) / 1e12, 1),
               copy_tb_s=round(2 * src.numel() * src.element_size() / (copy_ms / 1e3) / 1e12, 2),
               gpu=torch.cuda.get_device_name(), torch=torch.__version__)
    del a, b, src, dst
    torch.cuda.empty_cache()
    return row


def attention_scope(choice):
    """Restricts SDPA to one backend for the whole run (compilation included), or leaves PyTorch's choice."""
    from contextlib import nullcontext
    if choice == "auto":
        return nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
    return sdpa_kernel(backends[choice])


def mode_scope(mode):
    """The rowwise recipe as torchtitan runs it: inductor emulating the eager casts' rounding (emulate_precision_casts),
    without which its compiled scaling differs from eager's."""
    from contextlib import nullcontext
    if mode != "compile-fp8-rowwise":
        return nullcontext()
    from torch._inductor import config
    return config.patch(emulate_precision_casts=True)


def relaunch_on(gpus):
    """Runs this script again as `gpus` processes of torch.distributed.run on this host; returns their status."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={gpus}",
               os.path.abspath(__file__), *sys.argv[1:]]
    return subprocess.call(command)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", default="qwen2.5-0.5b,llama3.2-1b", help="presets or config.json paths, comma-separated")
    ap.add_argument("--modes", default="eager,compile", help="comma-separated; see above")
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--warm", type=int, default=3, help="steps run before timing (compilation happens in the first)")
    ap.add_argument("--batch", type=int, default=0, help="micro-batch rows a GPU (default: the config's, 8 mostly)")
    ap.add_argument("--seq", type=int, default=0, help="sequence length (default: the config's, 2048 mostly)")
    ap.add_argument("--gpus", type=int, default=0, help="GPUs of this host (default: WORLD_SIZE under torchrun, else 1)")
    ap.add_argument("--dist", default="ddp", help="with several GPUs: ddp, fsdp or both (ddp,fsdp)")
    ap.add_argument("--attention", default="auto", choices=["auto", "flash", "cudnn", "efficient", "math"],
                    help="the SDPA backend (auto: PyTorch's choice, recorded in each row)")
    ap.add_argument("--compile-scope", default="model", choices=["model", "block"],
                    help="what one torch.compile takes: the whole model, or each block and the tail apart (as "
                    "torchtitan compiles; much faster to compile). With --dist fsdp always each block")
    ap.add_argument("--no-ceilings", action="store_true", help="skip the GEMM and copy ceilings")
    ap.add_argument("--check-torchao", action="store_true", help="say whether torchao's float8 imports, and exit")
    a = ap.parse_args()

    if a.check_torchao:
        try:
            float8 = import_torchao_float8()
        except ImportError as e:
            print(e)
            return 1
        print(f"torchao float8 from {os.path.dirname(os.path.dirname(float8.__file__))}")
        return 0
    dist = Distributed()
    if a.gpus > 1 and "WORLD_SIZE" not in os.environ:
        return relaunch_on(a.gpus)
    if a.gpus and a.gpus != dist.world:
        raise SystemExit(f"--gpus {a.gpus} under a launcher of {dist.world} processes")
    torch.backends.cuda.matmul.allow_tf32 = True  # any fp32 matmul left outside autocast on tensor cores
    if dist.world > 1:
        torch.cuda.set_device(dist.local_rank)
        torch.distributed.init_process_group("nccl")
    if not a.no_ceilings and dist.rank == 0:
        print(json.dumps(measure_ceilings()), flush=True)
    dist_modes = a.dist.split(",") if dist.world > 1 else ["none"]
    for config in a.configs.split(","):
        name, s, batch, seq = resolve_config(config)
        batch, seq = a.batch or batch, a.seq or seq
        for mode in a.modes.split(","):
            for dist_mode in dist_modes:
                try:
                    with attention_scope(a.attention), mode_scope(mode):
                        row = measure(name, s, batch, seq, mode, dist, dist_mode, a.compile_scope, a.steps, a.warm)
                except Exception as e:  # out of memory, torchao missing: a row saying so, then the next run
                    row = dict(config=name, mode=mode, gpus=dist.world, dist=dist_mode, error=str(e)[:300])
                if dist.rank == 0:
                    print(json.dumps(row), flush=True)
                gc.collect()
                torch.cuda.empty_cache()
    if dist.world > 1:
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
