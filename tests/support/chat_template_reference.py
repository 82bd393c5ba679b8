#!/usr/bin/python3
"""Renders a chat template as transformers' apply_chat_template does (jinja2, reference for tests).

Usage: chat_template_reference.py TEMPLATE_FILE CONTEXT_JSON_FILE
Prints {"text": ..., "generation": [[begin, end], ...]} with byte offsets into the UTF-8 text,
or {"error": ...} when jinja2 raises. Needs jinja2 (Debian's /usr/bin/python3 has it).
"""
import functools
import json
import sys
from datetime import datetime

from jinja2 import nodes
from jinja2.exceptions import TemplateError
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationTracker(Extension):
    """{% generation %}...{% endgeneration %}: renders the body, records its character span."""

    tags = {"generation"}

    def __init__(self, environment):
        super().__init__(environment)
        self.rendered = None  # the blocks yielded so far, while rendering
        self.spans = []

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        call = self.call_method("_generation", [], [], lineno=lineno)
        return nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _generation(self, caller):
        rv = caller()
        begin = len("".join(self.rendered))
        self.spans.append((begin, begin + len(rv)))
        return rv


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


@functools.lru_cache(maxsize=8)
def compiled(source):
    """The template and its generation tracker, compiled once (as transformers caches it)."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    tracker = next(e for e in env.extensions.values() if isinstance(e, GenerationTracker))
    return env.from_string(source), tracker


def render(source, context):
    template, tracker = compiled(source)
    tracker.rendered, tracker.spans = [], []
    for block in template.generate(**context):
        tracker.rendered.append(block)
    text = "".join(tracker.rendered)
    byte = lambda chars: len(text[:chars].encode("utf-8"))
    return {"text": text, "generation": [[byte(b), byte(e)] for b, e in tracker.spans]}


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        source = f.read()
    with open(sys.argv[2], encoding="utf-8") as f:
        context = json.load(f)
    try:
        result = render(source, context)
    except Exception as e:  # report jinja2's error instead of a traceback
        result = {"error": f"{type(e).__name__}: {e}"}
    print(json.dumps(result, ensure_ascii=False))


if __name__ == "__main__":
    main()
