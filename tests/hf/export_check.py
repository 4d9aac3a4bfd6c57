#!/usr/bin/env python3
"""`tokamak export` read by transformers: AutoTokenizer and AutoModelForCausalLM load an export and continue a
prompt greedily exactly as `tokamak generate --temperature 0` does.

It learns a 4096-token BPE from the Brown Corpus (`tokamak train-tokenizer`), prepares the corpus with it, trains
the tiny preset briefly, exports the run directory (`tokamak export --checkpoint RUN`: its latest checkpoint),
and checks, for a few prompts:
  - the exported files: config.json's torch_dtype and dtype, generation_config.json's bos/eos ids,
    tokenizer_config.json's model_max_length equal to max_position_embeddings;
  - AutoTokenizer's ids equal to `tokamak tokenize`'s;
  - transformers' greedy continuation (float32, eager attention, CPU) equal, token for token, to that of
    `tokamak generate --temperature 0 --device cpu`, from the run and from the export.
Needs python3 with torch and transformers, the Brown Corpus in .cache/brown (scripts/setup.sh), no network:

    python3 tests/hf/export_check.py --tokamak build-gpu/tokamak [--device cuda] [--keep DIR]

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


def make_export(args, work):
    """A trained run of the tiny preset with a Brown BPE, and its export: the paths of both and the tokenizer."""
    tk = args.tokamak
    tok, data, run_dir, hf = (os.path.join(work, d) for d in ("tok", "data", "run", "hf"))
    run([tk, "train-tokenizer", "--input", args.corpus, "--vocab-size", "4096", "--out", tok])
    run([tk, "prepare", "--tokenizer", os.path.join(tok, "tokenizer.json"), "--input", args.corpus, "--out", data])
    run([tk, "train", "--model", "tiny", "--vocab-size", "4096", "--data", data, "--out", run_dir, "--overwrite",
         "--batch", "8", "--seq", "128", "--steps", str(args.steps), "--lr", "3e-3", "--warmup", "20",
         "--eval-tokens", "0", "--save-every", "0", "--device", args.device])
    r = run([tk, "export", "--checkpoint", run_dir, "--out", hf, "--dtype", "f32"])
    print("  " + r.stderr.strip().replace("\n", "\n  "))
    return run_dir, hf


def check_files(hf, failures):
    config = json.load(open(os.path.join(hf, "config.json")))
    generation = json.load(open(os.path.join(hf, "generation_config.json")))
    tokenizer_config = json.load(open(os.path.join(hf, "tokenizer_config.json")))
    checks = [
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


def tokamak_ids(args, hf, text):
    out = run([args.tokamak, "tokenize", "--tokenizer", os.path.join(hf, "tokenizer.json")], input=text).stdout
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
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="tokamak's training backend")
    ap.add_argument("--steps", type=int, default=300, help="training steps: enough for a non-trivial continuation")
    ap.add_argument("--keep", metavar="DIR", help="keep the tokenizer, data, run and export under DIR")
    args = ap.parse_args()
    if not os.access(args.tokamak, os.X_OK):
        sys.exit(f"error: {args.tokamak} is not an executable tokamak binary (--tokamak PATH)")
    args.tokamak = os.path.abspath(args.tokamak)
    transformers.logging.set_verbosity_error()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}; tokamak {args.tokamak}")
    work = args.keep or tempfile.mkdtemp(prefix="tk_export_check_")
    os.makedirs(work, exist_ok=True)
    failures = []
    try:
        run_dir, hf = make_export(args, work)
        check_files(hf, failures)
        tokenizer = AutoTokenizer.from_pretrained(hf)
        model = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32, attn_implementation="eager").eval()
        for prompt in PROMPTS:
            ids = tokenizer(prompt, add_special_tokens=False).input_ids
            same_ids = ids == tokamak_ids(args, hf, prompt)
            with torch.no_grad():
                out = model.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False,
                                     pad_token_id=tokenizer.eos_token_id)
            hf_text = tokenizer.decode(out[0, len(ids):], skip_special_tokens=True)
            from_run, from_export = tokamak_continuation(args, run_dir, prompt), tokamak_continuation(args, hf, prompt)
            ok = same_ids and hf_text == from_run == from_export
            print(f"  {prompt!r:<32} {'ok' if ok else 'FAIL'}: {hf_text!r}")
            if not ok:
                failures.append(f"prompt {prompt!r}: ids equal {same_ids}; transformers {hf_text!r}, "
                                f"tokamak (run) {from_run!r}, tokamak (export) {from_export!r}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    for f in failures:
        print(f"FAIL {f}")
    print(f"{'PASS' if not failures else 'FAIL'}: export loaded by transformers, {len(PROMPTS)} prompts, "
          f"{len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
