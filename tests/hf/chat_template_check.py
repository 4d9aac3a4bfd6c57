#!/usr/bin/env python3
"""tokamak's chat templates against transformers' apply_chat_template: for a few hundred generated conversations per
template (system prompts, several turns, empty and unicode content, tool calls and tools, reasoning,
add_generation_prompt and enable_thinking on and off), the rendered text is byte-identical, the token ids identical,
and, where the template has {% generation %} blocks, the assistant mask equal to return_assistant_tokens_mask's.
A conversation the template refuses (raise_exception) must be refused by both.

Each template is a .jinja file (put into a tokenizer directory of its own beside --tokenizer-json, with bos_token
and eos_token in its tokenizer_config.json) or a tokenizer directory (tokenizer.json and tokenizer_config.json, with
its chat_template.jinja if any). By default: the real models' templates of .cache/chat_templates
(scripts/fetch_chat_templates.sh) and tests/fixtures/chat_templates, with Llama 3's tokenizer.json
(.cache/llama3, scripts/fetch_llama3_tokenizer.sh). Needs python3 with transformers and jinja2, no network:

    python3 tests/hf/chat_template_check.py --tokamak build-gpu/tokamak [--conversations 300] [TEMPLATE|DIR ...]

Prints one line per template and exits non-zero on any difference.
"""
import argparse
import glob
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

from transformers import AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PIECES = ["hello", "Héllo", "世界", "🎉", "  leading", "trailing  ", "line\nbreak", "\n\nnewlines\n", "<b>tag</b>",
          '{"json": 1}', "tab\there", "'quote'", '"double"', "back\\slash", "ünïcödé", "Ça va?", "</tool_response>",
          "<tool_response>", "a", "The quick brown fox.", "1.5", "  ", "\u00a0nbsp"]
GENERATION = re.compile(r"\{%-?\s*generation\s*-?%\}")


def text(rng):
    if rng.random() < 0.08:
        return ""
    return " ".join(rng.choice(PIECES) for _ in range(rng.randint(1, 6)))


def conversation(rng):
    """One conversation as tokamak's tests/cpu/chat_template_models_test.cpp generates them."""
    messages = []
    if rng.random() < 0.5:
        messages.append({"role": "system", "content": text(rng)})
    turns = rng.randint(1, 4)
    for t in range(turns):
        messages.append({"role": "user", "content": text(rng)})
        if t == turns - 1 and rng.random() < 0.4:
            break
        assistant = {"role": "assistant", "content": text(rng)}
        if rng.random() < 0.2:
            assistant["content"] = "<think>\n" + text(rng) + "\n</think>\n\n" + text(rng)
        if rng.random() < 0.1:
            assistant["reasoning_content"] = text(rng)
        if rng.random() < 0.25:
            args = {"city": text(rng), "days": rng.randint(1, 9), "exact": rng.random() < 0.5}
            call = {"type": "function", "function": {"name": "get_weather", "arguments": args}}
            if rng.random() < 0.2:
                call["function"]["arguments"] = json.dumps(args)
            assistant["tool_calls"] = [call]
            if rng.random() < 0.3:
                assistant["content"] = ""
            messages.append(assistant)
            messages.append({"role": "tool", "content": text(rng)})
            if rng.random() < 0.3:
                messages.append({"role": "tool", "content": '{"temperature": 21.5}'})
            continue
        messages.append(assistant)
    tools = None
    if rng.random() < 0.3:
        tools = [{"type": "function", "function": {
            "name": "lookup" if i else "get_weather", "description": text(rng),
            "parameters": {"type": "object",
                           "properties": {"city": {"type": "string", "description": "Stadt, 都市"},
                                          "days": {"type": "integer"}},
                           "required": ["city"]}}} for i in range(rng.randint(1, 2))]
    variables = {}
    if rng.random() < 0.5:
        variables["enable_thinking"] = rng.random() < 0.5
    return {"messages": messages, "tools": tools, "add_generation_prompt": rng.random() < 0.5, "variables": variables}


def tokenizer_dir(path, tokenizer_json, work):
    """A tokenizer directory for a template file, or the directory given."""
    if os.path.isdir(path):
        return path
    d = os.path.join(work, os.path.basename(path).replace(".jinja", ""))
    os.makedirs(d, exist_ok=True)
    shutil.copy(tokenizer_json, os.path.join(d, "tokenizer.json"))
    with open(path, encoding="utf-8") as f:
        source = f.read()
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>",
              "eos_token": "<|eot_id|>", "chat_template": source}
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False)
    return d


def template_source(d):
    jinja = os.path.join(d, "chat_template.jinja")
    if os.path.exists(jinja):
        with open(jinja, encoding="utf-8") as f:
            return f.read()
    with open(os.path.join(d, "tokenizer_config.json"), encoding="utf-8") as f:
        t = json.load(f)["chat_template"]
    return t if isinstance(t, str) else next(e["template"] for e in t if e["name"] == "default")


def transformers_results(d, cases, marked):
    tok = AutoTokenizer.from_pretrained(d)
    out = []
    for c in cases:
        kw = dict(tools=c["tools"], add_generation_prompt=c["add_generation_prompt"], **c["variables"])
        try:
            rendered = tok.apply_chat_template(c["messages"], tokenize=False, **kw)
            enc = tok.apply_chat_template(c["messages"], tokenize=True, return_dict=True,
                                          return_assistant_tokens_mask=marked, **kw)
            ids = list(enc["input_ids"])
            r = {"text": rendered, "ids": ids}
            if marked:
                r["generation_mask"] = list(enc["assistant_masks"])
            out.append(r)
        except Exception as e:  # the template refused the conversation: tokamak must refuse it too
            out.append({"error": f"{type(e).__name__}: {e}"})
    return out


def tokamak_results(tokamak, d, cases, work):
    path = os.path.join(work, "conversations.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for c in cases:
            f.write(json.dumps(c, ensure_ascii=False) + "\n")
    with open(path, encoding="utf-8") as f:
        r = subprocess.run([tokamak, "tokenize", "--tokenizer", d, "--chat"], stdin=f, capture_output=True,
                           text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"tokamak tokenize --chat failed: {r.stderr}")
    return [json.loads(line) for line in r.stdout.splitlines() if line]


def compare(name, want, got, marked):
    counts = {"text": 0, "ids": 0, "mask": 0, "refused": 0, "different": 0}
    for i, (w, g) in enumerate(zip(want, got)):
        if "error" in w or "error" in g:
            if "error" in w and "error" in g:
                counts["refused"] += 1
                continue
            counts["different"] += 1
            print(f"  {name} #{i}: transformers {w.get('error', 'renders')!r}, tokamak {g.get('error', 'renders')!r}")
            continue
        same_text, same_ids = w["text"] == g["text"], w["ids"] == g["ids"]
        same_mask = not marked or w["generation_mask"] == g["generation_mask"]
        counts["text"] += same_text
        counts["ids"] += same_ids
        counts["mask"] += same_mask and marked
        if not (same_text and same_ids and same_mask):
            counts["different"] += 1
            if counts["different"] <= 3:
                print(f"  {name} #{i}: text {same_text}, ids {same_ids}, mask {same_mask}\n"
                      f"    transformers {w['text'][:300]!r}\n    tokamak      {g['text'][:300]!r}")
    return counts


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokamak", required=True)
    ap.add_argument("--tokenizer-json", default=os.path.join(ROOT, ".cache/llama3/tokenizer.json"))
    ap.add_argument("--conversations", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("templates", nargs="*")
    a = ap.parse_args()
    templates = a.templates or sorted(glob.glob(os.path.join(ROOT, ".cache/chat_templates/*.jinja"))) + sorted(
        glob.glob(os.path.join(ROOT, "tests/fixtures/chat_templates/*.jinja")))
    if not templates:
        sys.exit("no templates: run scripts/fetch_chat_templates.sh, or name template files or tokenizer directories")
    failed = False
    with tempfile.TemporaryDirectory() as work:
        for i, path in enumerate(templates):
            d = tokenizer_dir(path, a.tokenizer_json, work)
            marked = bool(GENERATION.search(template_source(d)))
            rng = random.Random(a.seed * 1000 + i)
            cases = [conversation(rng) for _ in range(a.conversations)]
            want = transformers_results(d, cases, marked)
            got = tokamak_results(a.tokamak, d, cases, work)
            c = compare(os.path.basename(path), want, got, marked)
            rendered = len(cases) - c["refused"]
            print(f"{'FAIL' if c['different'] else 'PASS'} {os.path.basename(path)}: {len(cases)} conversations, "
                  f"{rendered} rendered: {c['text']} identical texts, {c['ids']} identical ids"
                  + (f", {c['mask']} identical assistant masks" if marked else " (no generation blocks)")
                  + f"; {c['refused']} refused by both; {c['different']} different")
            failed |= c["different"] > 0
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
