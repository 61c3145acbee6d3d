#!/usr/bin/env python3
"""Runs the FileCheck-style tool tests: every *.ir file in a directory.

    lit.py EMBER_OPT EMBER_RUN TESTS_DIR [NAME_FILTER]

Each test file holds one or more `// RUN: <command>` lines (a trailing `\\`
continues the command on the next RUN line). In a command:
  %ember-opt, %ember-run   the tool binaries
  %ember-example           ember-example, found beside ember-opt
  %s                       the test file
  FileCheck                tests/tools/filecheck.py (CHECK lines of the file)
  not CMD                  succeeds iff CMD exits with status 1 (the tools'
                           error status); a crash or any other status fails
Commands run under `bash -o pipefail`. A test passes when all its RUN lines
exit 0. Prints one line per test and a summary; exit 1 if any test failed.
"""

import os
import re
import shlex
import subprocess
import sys


def run_lines(path):
    cmds, cur = [], None
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.search(r"//\s*RUN:(.*)$", line)
            if not m:
                continue
            part = m.group(1).strip()
            cont = part.endswith("\\")
            if cont:
                part = part[:-1].rstrip()
            cur = part if cur is None else cur + " " + part
            if not cont:
                cmds.append(cur)
                cur = None
    if cur is not None:
        cmds.append(cur)
    return cmds


def main(argv):
    if len(argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    opt, run, tests_dir = (os.path.abspath(a) for a in argv[1:4])
    name_filter = argv[4] if len(argv) > 4 else ""
    example = os.path.join(os.path.dirname(opt), "ember-example")
    here = os.path.dirname(os.path.abspath(__file__))
    filecheck = "%s %s" % (
        shlex.quote(sys.executable),
        shlex.quote(os.path.join(here, "filecheck.py")),
    )
    prelude = (
        "set -o pipefail\n"
        'not() { "$@"; local rc=$?; if [ $rc -ne 1 ]; then '
        'echo "not: expected exit status 1, got $rc: $*" >&2; return 1; fi; return 0; }\n'
    )
    tests = sorted(f for f in os.listdir(tests_dir) if f.endswith(".ir") and name_filter in f)
    if not tests:
        print("lit: no *.ir tests in " + tests_dir, file=sys.stderr)
        return 1
    failed = []
    for name in tests:
        path = os.path.join(tests_dir, name)
        cmds = run_lines(path)
        if not cmds:
            print("FAIL %s: no RUN lines" % name)
            failed.append(name)
            continue
        ok = True
        for cmd in cmds:
            full = (
                cmd.replace("%ember-example", shlex.quote(example))
                .replace("%ember-opt", shlex.quote(opt))
                .replace("%ember-run", shlex.quote(run))
                .replace("%s", shlex.quote(path))
            )
            full = re.sub(r"\bFileCheck\b", lambda _: filecheck, full)
            try:
                r = subprocess.run(
                    ["bash", "-c", prelude + full], capture_output=True, text=True, timeout=60
                )
                rc, out, err = r.returncode, r.stdout, r.stderr
            except subprocess.TimeoutExpired:
                rc, out, err = -1, "", "timed out after 60 s"
            if rc != 0:
                ok = False
                print("FAIL %s\n  RUN: %s\n  exit status %d\n%s%s" % (name, cmd, rc, out, err))
                break
        if ok:
            print("PASS %s (%d RUN line%s)" % (name, len(cmds), "" if len(cmds) == 1 else "s"))
        else:
            failed.append(name)
    print("tools_lit: %d passed, %d failed" % (len(tests) - len(failed), len(failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
