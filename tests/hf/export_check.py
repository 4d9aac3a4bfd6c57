#!/usr/bin/env python3
"""`tokamak export` read by transformers: AutoTokenizer and AutoModelForCausalLM load an export and continue a
prompt greedily exactly as `tokamak generate --temperature 0` does, for both kinds of tokenizer a run has.

For each kind it prepares the Brown Corpus with the tokenizer, trains the tiny preset briefly, exports the run
directory (`tokamak export --checkpoint RUN`: its latest checkpoint) and checks it:
  - bpe: a 4096-token BPE learned from Brown (`tokamak train-tokenizer`: tokenizer.json), the vocabulary unpadded;
  - gpt2: GPT-2's own files (encoder.json + vocab.bpe in .cache/gpt2), which the export turns into the
    tokenizer.json AutoTokenizer loads; the model's vocabulary padded from 50257 to 50304.
The checks, for a few prompts:
  - the exported files: config.json's torch_dtype and dtype, generation_config.json's bos/eos ids and its
    suppress_tokens (the padding ids, none for bpe), tokenizer.json present, tokenizer_config.json's
    model_max_length equal to max_position_embeddings;
  - AutoTokenizer's ids equal to `tokamak tokenize`'s, with the exported tokenizer.json and with the tokenizer the
    data was prepared with;
  - transformers' greedy continuation (float32, eager attention, CPU; generation_config.json's suppress_tokens keep
    it off the padding ids, as tokamak's generate is) equal, token for token, to that of
    `tokamak generate --temperature 0 --device cpu`, from the run and from the export.
Needs python3 with torch and transformers, the Brown Corpus in .cache/brown and GPT-2's files in .cache/gpt2
(scripts/setup.sh), no network:

    python3 tests/hf/export_check.py --tokamak build-gpu/tokamak --device cuda [--kinds bpe,gpt2] [--keep DIR]

--device is the training backend (the checkpoint holds f32 weights either way); generation runs on the CPU.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

PROMPTS = ["The jury said", "It was the first time that", "In the morning the", "\n"]
NEW_TOKENS = 24


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return r


def make_export(args, kind, work):
    """A trained run of the tiny preset with the tokenizer of `kind`, and its export: the paths of both and of the
    tokenizer the data was prepared with."""
    tk = args.tokamak
    tok, data, run_dir, hf = (os.path.join(work, d) for d in ("tok", "data", "run", "hf"))
    if kind == "bpe":
        run([tk, "train-tokenizer", "--input", args.corpus, "--vocab-size", "4096", "--out", tok])
        tok = os.path.join(tok, "tokenizer.json")
    else:
        tok = args.gpt2
    run([tk, "prepare", "--tokenizer", tok, "--input", args.corpus, "--out", data])
    run([tk, "train", "--model", "tiny", "--data", data, "--out", run_dir, "--overwrite", "--batch", "8", "--seq",
         "128", "--steps", str(args.steps), "--lr", "3e-3", "--warmup", "20", "--eval-tokens", "0", "--save-every", "0",
         "--device", args.device])
    r = run([tk, "export", "--checkpoint", run_dir, "--out", hf, "--dtype", "f32", "--overwrite"])
    print("  " + r.stderr.strip().replace("\n", "\n  "))
    return run_dir, hf, tok


def check_files(hf, tokenizer, failures):
    config = json.load(open(os.path.join(hf, "config.json")))
    generation = json.load(open(os.path.join(hf, "generation_config.json")))
    tokenizer_config = json.load(open(os.path.join(hf, "tokenizer_config.json")))
    padding = list(range(len(tokenizer), config["vocab_size"]))
    checks = [
        ("tokenizer.json", os.path.exists(os.path.join(hf, "tokenizer.json"))),
        (f"generation_config.json suppress_tokens ({len(padding)} padding ids)",
         generation.get("suppress_tokens", []) == padding),
        ("config.json torch_dtype and dtype", config.get("torch_dtype") == config.get("dtype") == "float32"),
        ("generation_config.json eos_token_id", generation.get("eos_token_id") == config["eos_token_id"]),
        ("generation_config.json bos_token_id", generation.get("bos_token_id") == config["bos_token_id"]),
        ("tokenizer_config.json model_max_length",
         tokenizer_config.get("model_max_length") == config["max_position_embeddings"]),
        ("GenerationConfig.from_pretrained", GenerationConfig.from_pretrained(hf).eos_token_id == config["eos_token_id"]),
    ]
    for what, ok in checks:
        print(f"  {what:<48} {'ok' if ok else 'FAIL'}")
        if not ok:
            failures.append(what)


def tokamak_ids(args, tokenizer, text):
    out = run([args.tokamak, "tokenize", "--tokenizer", tokenizer], input=text).stdout
    return [int(t) for t in out.split()]


def tokamak_continuation(args, model_dir, prompt):
    """What `tokamak generate` prints after the prompt (it prints the prompt, the continuation and a newline)."""
    out = run([args.tokamak, "generate", "--model", model_dir, "--prompt", prompt, "--max-new-tokens",
               str(NEW_TOKENS), "--temperature", "0", "--device", "cpu"]).stdout
    assert out.startswith(prompt) and out.endswith("\n"), repr(out)
    return out[len(prompt):-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokamak", default="build-gpu/tokamak", help="path to the tokamak binary")
    ap.add_argument("--corpus", default=".cache/brown", help="text to learn the tokenizer from and train on")
    ap.add_argument("--gpt2", default=".cache/gpt2", help="GPT-2's encoder.json and vocab.bpe (the gpt2 kind)")
    ap.add_argument("--kinds", default="bpe,gpt2", help="the tokenizer kinds to check: bpe, gpt2 or both")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="tokamak's training backend")
    ap.add_argument("--steps", type=int, default=300, help="training steps: enough for a non-trivial continuation")
    ap.add_argument("--keep", metavar="DIR", help="keep the tokenizer, data, run and export under DIR")
    args = ap.parse_args()
    if not os.access(args.tokamak, os.X_OK):
        sys.exit(f"error: {args.tokamak} is not an executable tokamak binary (--tokamak PATH)")
    args.tokamak = os.path.abspath(args.tokamak)
    transformers.logging.set_verbosity_error()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}; tokamak {args.tokamak}")
    kinds = [k for k in args.kinds.split(",") if k]
    if not kinds or any(k not in ("bpe", "gpt2") for k in kinds):
        sys.exit(f"error: --kinds is {args.kinds!r}: give bpe, gpt2 or bpe,gpt2")
    work = args.keep or tempfile.mkdtemp(prefix="tk_export_check_")
    os.makedirs(work, exist_ok=True)
    failures = []
    try:
        for kind in kinds:
            print(f"{kind}:")
            check_kind(args, kind, os.path.join(work, kind), failures)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    for f in failures:
        print(f"FAIL {f}")
    print(f"{'PASS' if not failures else 'FAIL'}: export loaded by transformers, {'+'.join(kinds)} tokenizers, "
          f"{len(PROMPTS)} prompts each, {len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


def check_kind(args, kind, work, failures):
    """One kind's export: its files, AutoTokenizer's ids and transformers' greedy continuations."""
    os.makedirs(work, exist_ok=True)
    mine = []
    run_dir, hf, prepared_with = make_export(args, kind, work)
    tokenizer = AutoTokenizer.from_pretrained(hf)
    check_files(hf, tokenizer, mine)
    model = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32, attn_implementation="eager").eval()
    for prompt in PROMPTS:
        ids = tokenizer(prompt, add_special_tokens=False).input_ids
        same_ids = ids == tokamak_ids(args, os.path.join(hf, "tokenizer.json"), prompt) == \
            tokamak_ids(args, prepared_with, prompt)
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False,
                                 pad_token_id=tokenizer.eos_token_id)
        hf_text = tokenizer.decode(out[0, len(ids):], skip_special_tokens=True)
        from_run, from_export = tokamak_continuation(args, run_dir, prompt), tokamak_continuation(args, hf, prompt)
        ok = same_ids and hf_text == from_run == from_export
        print(f"  {prompt!r:<32} {'ok' if ok else 'FAIL'}: {hf_text!r}")
        if not ok:
            mine.append(f"prompt {prompt!r}: ids equal {same_ids}; transformers {hf_text!r}, "
                        f"tokamak (run) {from_run!r}, tokamak (export) {from_export!r}")
    failures.extend(f"{kind}: {f}" for f in mine)


if __name__ == "__main__":
    main()
