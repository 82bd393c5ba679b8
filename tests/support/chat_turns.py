"""The text prepare-data --messages-field should train on, from jinja2 (the reference for tests).

Usage: chat_turns.py TEMPLATE_SOURCE CONVERSATIONS_JSONL [FIELD [KWARGS]]
TEMPLATE_SOURCE: a tokenizer_config.json (its chat_template and special tokens) or a Jinja file;
KWARGS: a JSON object of more variables (apply_chat_template's **kwargs).
Prints one JSON line per stretch of the conversations' renderings, in order, that is scored or
not: {"scored": bool, "text": ...}, adjacent stretches alike merged. A conversation is rendered
as transformers' apply_chat_template renders it (chat_template_reference.render); its assistant
turns are its {% generation %} blocks or, without them, the text between render(messages[:i],
add_generation_prompt=True) and render(messages[:i+1]) for each assistant message i. A turn that
is not so (the template renders history differently) exits 1.
"""
import json
import sys

sys.dont_write_bytecode = True  # nothing written into the source tree
from chat_template_reference import render  # noqa: E402


def special_tokens(config):
    text = lambda v: v["content"] if isinstance(v, dict) else v
    tokens = {k: text(config[k]) for k in ("bos_token", "eos_token", "unk_token", "sep_token",
                                           "pad_token", "cls_token", "mask_token")
              if config.get(k) is not None}
    if "additional_special_tokens" in config:
        tokens["additional_special_tokens"] = [text(t) for t in config["additional_special_tokens"]]
    return tokens


def turns(source, base, row):
    def rendered(messages, prompt):
        context = dict(base, messages=messages, tools=row.get("tools"), documents=None,
                       add_generation_prompt=prompt)
        result = render(source, context)
        if "error" in result:
            sys.exit(f"jinja2: {result['error']}")
        return result

    whole = rendered(row["messages"], False)
    text = whole["text"].encode("utf-8")
    if whole["generation"]:
        return text, whole["generation"]
    spans = []
    for i, m in enumerate(row["messages"]):
        if m["role"] != "assistant":
            continue
        prompt = rendered(row["messages"][:i], True)["text"].encode("utf-8")
        turn = rendered(row["messages"][:i + 1], False)["text"].encode("utf-8")
        if not (text.startswith(prompt) and text.startswith(turn)):
            sys.exit(f"message {i + 1} is rendered differently once later messages follow")
        spans.append((len(prompt), len(turn)))
    return text, spans


def main():
    source_file, conversations = sys.argv[1], sys.argv[2]
    field = sys.argv[3] if len(sys.argv) > 3 else "messages"
    kwargs = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    with open(source_file, encoding="utf-8") as f:
        source = f.read()
    base = {}
    if source_file.endswith(".json"):
        config = json.loads(source)
        source, base = config["chat_template"], special_tokens(config)
    base.update(kwargs)
    stretches = []  # [scored, bytes]

    def add(scored, piece):
        if not piece:
            return
        if stretches and stretches[-1][0] == scored:
            stretches[-1][1] += piece
        else:
            stretches.append([scored, piece])

    with open(conversations, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            text, spans = turns(source, base, {"messages": row[field], "tools": row.get("tools")})
            at = 0
            for begin, end in spans:
                add(False, text[at:begin])
                add(True, text[begin:end])
                at = end
            add(False, text[at:])
    for scored, piece in stretches:
        print(json.dumps({"scored": scored, "text": piece.decode("utf-8")}, ensure_ascii=False))


if __name__ == "__main__":
    main()
