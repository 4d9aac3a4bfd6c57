#!/usr/bin/env python3
"""The reference the chat template tests compare tokamak's renderer with: jinja2 configured as transformers'
apply_chat_template configures it (an immutable sandbox, trim_blocks and lstrip_blocks, loop controls, its tojson,
raise_exception and strftime_now, and {% generation %} blocks whose spans are reported).

Reads a JSON list of cases from the file named on the command line, each {"template": str, "variables": {...},
"now": unix seconds}, and writes a JSON list of results to stdout: {"text": str, "generation": [[begin, end], ...]}
with UTF-8 byte offsets, or {"error": "TypeName: message"}.
"""
import datetime
import json
import sys

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

BEGIN, END = "\ue000", "\ue001"  # private-use markers around each generation block's output


class GenerationBlocks(Extension):
    """{% generation %}...{% endgeneration %}: the body is printed between two markers, found again afterwards."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_mark"), [], [], body).set_lineno(lineno)

    def _mark(self, caller):
        return BEGIN + caller() + END


def to_json(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def environment(now):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationBlocks, "jinja2.ext.loopcontrols"])
    env.filters["tojson"] = to_json

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def strftime_now(fmt):
        return datetime.datetime.fromtimestamp(now).strftime(fmt)

    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def spans(text):
    """The text without markers, and the markers' places as UTF-8 byte offsets."""
    out, found, start = [], [], None
    size = 0
    for ch in text:
        if ch == BEGIN:
            start = size
        elif ch == END:
            found.append([start, size])
        else:
            out.append(ch)
            size += len(ch.encode("utf-8"))
    return "".join(out), found


_compiled = {}


def compile_once(source, now):
    key = (source, now)
    if key not in _compiled:
        _compiled[key] = environment(now).from_string(source)
    return _compiled[key]


def render(case):
    try:
        template = compile_once(case["template"], case.get("now", 0))
        text, generation = spans(template.render(**case.get("variables", {})))
        return {"text": text, "generation": generation}
    except Exception as e:  # every failure is a result: the test compares that tokamak fails too
        return {"error": f"{type(e).__name__}: {e}"}


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    json.dump([render(c) for c in cases], sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
