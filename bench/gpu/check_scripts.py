#!/usr/bin/env python3
"""Syntax checks of the scripts a GPU run executes, made here without running them, so that a
typo is found on the CPU and not in a lent GPU's minutes:

  - each shell script parses (bash -n), and so does every script it sources from the tree;
  - every awk program given inline (awk [-v NAME=VALUE | -F SEP | --]... 'PROGRAM') parses under
    each awk found (awk, mawk, gawk): the program runs behind a first BEGIN action that stops awk
    with a run-time error (a regular expression that does not compile), so nothing of it runs,
    and awk's complaint must be that error's and no other;
  - every Python program given inline (python3 -c 'PROGRAM', PROGRAM after python3 - <<'EOF')
    and every .py file compiles.

    check_scripts.py [--ctest BUILD_DIR LABEL] FILE...

--ctest adds the scripts that the ctest tests of LABEL in BUILD_DIR run (bash SCRIPT). Prints one
line per file ("ok    FILE: ..." or "FAIL  FILE:LINE: ..."); exits 1 if one fails, 2 on bad
arguments.
"""
import json
import os
import re
import shutil
import subprocess
import sys

AWKS = ("awk", "mawk", "gawk")
PYTHON_WORD = re.compile(r"python[0-9.]*\}?$", re.IGNORECASE)  # python3, "$python", ${PYTHON}
KEYWORDS = {"if", "then", "else", "elif", "do", "while", "until", "!", "time", "exec"}
SENTINEL = 'BEGIN { __parse_only = "("; if ("" ~ __parse_only) exit } '
SOURCED = re.compile(r'^\s*(?:source|\.)\s+"?\$\{?(?:SOURCE_DIR|SRC)\}?/([^"\s]+)"?', re.M)


class Scanner:
    """A tolerant reader of shell text: commands, words, quotes, $(...) nesting, comments and
    here-documents; collects the inline awk and Python programs with their line numbers."""

    def __init__(self, text):
        self.s, self.awk, self.python = text, [], []

    def line(self, i):
        return self.s.count("\n", 0, i) + 1

    def skip_until_closing(self, i, opener, closer):  # i after the opener; returns after closer
        depth = 1
        while i < len(self.s) and depth:
            depth += {opener: 1, closer: -1}.get(self.s[i], 0)
            i += 1
        return i

    def word(self, i):
        """One shell word from i: returns (literal, single_quoted_only, start_of_text, end)."""
        s, parts, sq_only, start = self.s, [], True, None
        while i < len(s) and s[i] not in " \t\n;|&<>()":
            c = s[i]
            if c == "'":
                j = s.index("'", i + 1)
                start = i + 1 if start is None else start
                parts.append(s[i + 1:j])
                i = j + 1
                continue
            sq_only = False
            if c == '"':
                j = i + 1
                while s[j] != '"':
                    if s[j] == "\\":
                        j += 2
                    elif s.startswith("$(", j):
                        j = self.dollar_paren(j)
                    else:
                        j += 1
                parts.append(s[i + 1:j])
                i = j + 1
            elif s.startswith("$((", i):
                i = self.skip_until_closing(i + 3, "(", ")") + 1
                parts.append("0")
            elif s.startswith("$(", i):
                i = self.dollar_paren(i)
                parts.append("0")
            elif s.startswith("${", i):
                j = self.skip_until_closing(i + 2, "{", "}")
                parts.append(s[i:j])
                i = j
            elif c == "\\":
                parts.append(s[i + 1:i + 2])
                i += 2
            else:
                parts.append(c)
                i += 1
        return "".join(parts), sq_only and bool(parts), start, i

    def dollar_paren(self, i):  # i at "$(": the commands inside are scanned; returns after ")"
        return self.commands(i + 2, nested=True)

    def commands(self, i, nested=False):
        s, heredocs, words = self.s, [], []
        while i < len(s):
            c = s[i]
            if c == "\n":
                i += 1
                for tag, strip, cmd in heredocs:
                    i = self.heredoc(i, tag, strip, cmd)
                heredocs, words = [], []
            elif c in " \t":
                i += 1
            elif c == "\\" and s.startswith("\\\n", i):
                i += 2
            elif c == "#":
                i = s.find("\n", i) if "\n" in s[i:] else len(s)
            elif c == ")" and nested:
                return i + 1
            elif s.startswith("((", i):
                i = self.skip_until_closing(i + 2, "(", ")") + 1
            elif s.startswith("<<<", i):
                i += 3
            elif s.startswith("<<", i):
                m = re.match(r"<<(-?)\s*(['\"]?)(\w+)\2", s[i:])
                heredocs.append((m.group(3), m.group(1) == "-", list(words)))
                i += m.end()
            elif c in ";|&<>(){}":
                if c in ";|&(){}":
                    words = []
                i += 1
            else:
                start = i
                literal, _, _, i = self.word(i)
                if not words and os.path.basename(literal) in AWKS:
                    i = self.awk_args(i)
                    continue
                if not words and PYTHON_WORD.search(literal):
                    i = self.python_args(i, start)
                    continue
                if literal not in KEYWORDS:
                    words.append(literal)
        return i

    def next_word(self, i):  # skips blanks and line continuations; None at the command's end
        s = self.s
        while i < len(s) and (s[i] in " \t" or s.startswith("\\\n", i)):
            i += 2 if s[i] == "\\" else 1
        if i >= len(s) or s[i] in "\n;|&)<>#":
            return None, i
        return self.word(i), i

    def awk_args(self, i):
        while True:
            w, begin = self.next_word(i)
            if w is None:
                return begin
            literal, sq_only, start, i = w
            if literal in ("-v", "-F", "-f"):
                if literal == "-f":  # the program is in a file
                    return i
                value, i = self.next_word(i)
                if value:
                    i = value[3]
            elif literal.startswith(("-v", "-F")) or literal == "--":
                continue
            else:
                program = literal if sq_only else self.spliced(self.s[begin:i])
                self.awk.append((self.line(start if start is not None else i), program))
                return i

    def spliced(self, raw):
        """A program word of single-quoted pieces and "$NAME" splices, each NAME assigned once in
        this file as NAME='TEXT': the program with TEXT in; None if it cannot be resolved."""
        pieces = re.findall(r"'([^']*)'|\"\$\{?(\w+)\}?\"", raw)
        if re.sub(r"'[^']*'|\"\$\{?\w+\}?\"", "", raw):
            return None
        out = []
        for text, name in pieces:
            if name:
                values = re.findall(rf"^\s*(?:local\s+)?{name}='([^']*)'", self.s, re.M)
                if len(values) != 1:
                    return None
                text = values[0]
            out.append(text)
        return "".join(out)

    def python_args(self, i, start):
        while True:
            w, i = self.next_word(i)
            if w is None:
                return i
            literal, i = w[0], w[3]
            if literal == "-c":
                w, i = self.next_word(i)
                if w:
                    self.python.append((self.line(w[2] if w[2] is not None else i), w[0]))
                    i = w[3]
                return i
            if literal == "-":
                self.python.append((self.line(start), None))  # the here-document follows
                return i
            if not literal.startswith("-"):
                return i

    def heredoc(self, i, tag, strip, cmd):
        s, body_start, lines = self.s, i, []
        while i < len(s):
            end = s.find("\n", i)
            end = len(s) if end < 0 else end
            line = s[i:end]
            i = end + 1
            if (line.lstrip("\t") if strip else line) == tag:
                break
            lines.append(line)
        for k, (at, program) in enumerate(self.python):
            if program is None:  # python3 - <<TAG: this body is the program
                self.python[k] = (self.line(body_start), "\n".join(lines))
        return i


def awk_programs_ok(path, programs, awks, report):
    ok = True
    for name, exe in awks:
        alone = subprocess.run([exe, SENTINEL], stdin=subprocess.DEVNULL, capture_output=True, text=True)
        for line, program in programs:
            if program is None:
                continue
            r = subprocess.run([exe, SENTINEL + program], stdin=subprocess.DEVNULL,
                               capture_output=True, text=True)
            if r.stderr != alone.stderr or r.stdout:
                err = (r.stderr.strip() or r.stdout.strip()).replace("\n", " | ")
                report(f"FAIL  {path}:{line}: the awk program does not parse under {name}: {err}")
                ok = False
    return ok


def python_ok(path, line, program, report):
    try:
        compile(program, f"{path}:{line}", "exec")
        return True
    except SyntaxError as e:
        report(f"FAIL  {path}:{line + (e.lineno or 1) - 1}: the Python program does not compile: {e.msg}")
        return False


def check(path, root, awks, report, seen):
    if path in seen:
        return True
    seen.add(path)
    with open(path) as f:
        text = f.read()
    if path.endswith(".py"):
        if not python_ok(path, 1, text, report):
            return False
        report(f"ok    {path}: compiles")
        return True
    r = subprocess.run(["bash", "-n", path], capture_output=True, text=True)
    if r.returncode:
        report(f"FAIL  {path}: bash -n: {r.stderr.strip()}")
        return False
    scan = Scanner(text)
    try:
        scan.commands(0)
    except (ValueError, IndexError, AttributeError):
        report(f"FAIL  {path}: its quoting could not be read (an unclosed quote or here-document?)")
        return False
    ok = awk_programs_ok(path, scan.awk, awks, report)
    for line, program in scan.python:
        ok = python_ok(path, line, program or "", report) and ok
    if ok:
        unread = sum(program is None for _, program in scan.awk)
        report(f"ok    {path}: bash -n, {len(scan.awk) - unread} awk program(s) under "
               f"{'/'.join(n for n, _ in awks)}, {len(scan.python)} Python program(s)"
               + (f"; {unread} awk program(s) spliced from what this file does not hold: unread" if unread else ""))
    for rel in SOURCED.findall(text):
        sourced = os.path.join(root, rel)
        if os.path.isfile(sourced):
            ok = check(sourced, root, awks, report, seen) and ok
    return ok


def ctest_scripts(build, label):
    r = subprocess.run(["ctest", "--test-dir", build, "-L", label, "--show-only=json-v1"],
                       capture_output=True, text=True, check=True)
    scripts = []
    for test in json.loads(r.stdout)["tests"]:
        command = test.get("command", [])
        scripts += [c for c in command[1:2] if os.path.basename(command[0]) == "bash"]
    return scripts


def main(argv):
    files = []
    if argv[:1] == ["--ctest"]:
        if len(argv) < 3:
            print(__doc__, file=sys.stderr)
            return 2
        files, argv = ctest_scripts(argv[1], argv[2]), argv[3:]
    files += argv
    if not files:
        print(__doc__, file=sys.stderr)
        return 2
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    awks, real = [], set()
    for name in AWKS:
        exe = shutil.which(name)
        if exe and os.path.realpath(exe) not in real:
            real.add(os.path.realpath(exe))
            awks.append((os.path.basename(os.path.realpath(exe)), exe))
    failed, seen = False, set()
    for path in files:
        failed |= not check(os.path.abspath(path), root, awks, print, seen)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
