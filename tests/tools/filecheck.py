#!/usr/bin/env python3
"""A small FileCheck: checks that stdin matches the CHECK lines of a file.

    filecheck.py CHECKFILE [--check-prefix=P]

Directives (P defaults to CHECK), each in a comment line of CHECKFILE:
  P: pat        pat occurs after the previous match
  P-NEXT: pat   pat occurs on the line right after the previous match's line
  P-SAME: pat   pat occurs on the same line as the previous match, after it
  P-NOT: pat    pat does not occur between the previous match and the next
                positive match (or the end of the input)
  P-EMPTY:      the next line after the previous match is empty
A pattern is literal text, except that {{regex}} is a Python regex and a run
of spaces matches any run of horizontal whitespace. Exit code 0 on success,
1 with a message naming the failing directive otherwise.
"""

import re
import sys


def compile_pattern(pat):
    parts = []
    pos = 0
    while True:
        start = pat.find("{{", pos)
        if start < 0:
            literal = pat[pos:]
            end = None
        else:
            literal = pat[pos:start]
            end = pat.find("}}", start + 2)
            if end < 0:
                raise ValueError("unterminated {{ in pattern: " + pat)
        for i, chunk in enumerate(re.split(r"[ \t]+", literal)):
            if i:
                parts.append(r"[ \t]+")
            parts.append(re.escape(chunk))
        if start < 0:
            break
        parts.append("(?:" + pat[start + 2 : end] + ")")
        pos = end + 2
    return re.compile("".join(parts), re.MULTILINE)


def read_directives(path, prefix):
    kinds = ("NEXT", "SAME", "NOT", "EMPTY")
    rx = re.compile(
        r"(?:^|[^A-Za-z0-9_-])" + re.escape(prefix) + r"(?:-(" + "|".join(kinds) + r"))?:(.*)$"
    )
    directives = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            m = rx.search(line)
            if not m:
                continue
            kind = m.group(1) or "CHECK"
            pat = m.group(2).strip()
            if kind != "EMPTY" and not pat:
                raise ValueError("%s:%d: empty pattern for %s" % (path, lineno, prefix))
            directives.append((kind, pat, lineno))
    return directives


def line_of(text, offset):
    return text.count("\n", 0, offset)


def line_bounds(text, line_index):
    """(start, end) offsets of line `line_index` (0-based), end excludes '\n'."""
    start = 0
    for _ in range(line_index):
        nl = text.find("\n", start)
        if nl < 0:
            return None
        start = nl + 1
    if start > len(text):
        return None
    end = text.find("\n", start)
    return (start, len(text) if end < 0 else end)


def main(argv):
    if len(argv) < 2:
        print("usage: filecheck.py CHECKFILE [--check-prefix=P]", file=sys.stderr)
        return 2
    path = argv[1]
    prefix = "CHECK"
    for a in argv[2:]:
        if a.startswith("--check-prefix="):
            prefix = a.split("=", 1)[1]
        else:
            print("filecheck.py: unknown option " + a, file=sys.stderr)
            return 2
    directives = read_directives(path, prefix)
    if not any(k != "NOT" for k, _, _ in directives):
        print("filecheck.py: %s has no %s: directives" % (path, prefix), file=sys.stderr)
        return 2
    text = sys.stdin.read()

    def fail(kind, pat, lineno, why):
        label = prefix if kind == "CHECK" else prefix + "-" + kind
        sys.stderr.write(
            "%s:%d: error: %s: %s\n  pattern: %s\n--- input was ---\n%s--- end of input ---\n"
            % (path, lineno, label, why, pat, text)
        )
        return 1

    pos = 0  # end of the previous match
    last_line = -1  # line of the previous match (-1: none yet)
    pending_not = []  # CHECK-NOTs waiting for the next positive match
    for kind, pat, lineno in directives:
        if kind == "NOT":
            pending_not.append((compile_pattern(pat), pat, lineno))
            continue
        if kind == "CHECK":
            m = compile_pattern(pat).search(text, pos)
            if not m:
                return fail(kind, pat, lineno, "no match after the previous match")
        elif kind in ("NEXT", "EMPTY"):
            bounds = line_bounds(text, last_line + 1)
            if bounds is None:
                return fail(kind, pat, lineno, "no line after the previous match")
            if kind == "EMPTY":
                if bounds[0] != bounds[1]:
                    return fail(kind, pat, lineno, "the next line is not empty")
                m = None
                match_start, match_end = bounds
            else:
                m = compile_pattern(pat).search(text, max(pos, bounds[0]), bounds[1])
                if not m:
                    return fail(kind, pat, lineno, "not on the line after the previous match")
        else:  # SAME
            bounds = line_bounds(text, max(last_line, 0))
            m = compile_pattern(pat).search(text, pos, bounds[1] if bounds else len(text))
            if not m:
                return fail(kind, pat, lineno, "not on the same line as the previous match")
        if m is not None:
            match_start, match_end = m.start(), m.end()
        for rx, npat, nline in pending_not:
            bad = rx.search(text, pos, match_start)
            if bad:
                return fail("NOT", npat, nline, "excluded text found: %r" % bad.group(0))
        pending_not = []
        pos = match_end
        last_line = line_of(text, match_start if kind != "EMPTY" else match_start)
        if kind == "EMPTY":
            pos = match_end + 1
    for rx, npat, nline in pending_not:
        bad = rx.search(text, pos)
        if bad:
            return fail("NOT", npat, nline, "excluded text found: %r" % bad.group(0))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
