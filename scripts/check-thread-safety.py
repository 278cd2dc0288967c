#!/usr/bin/env python3
"""clang's thread-safety analysis over the files that take DAR's locks.

Every translation unit in BUILD/compile_commands.json whose source, or (tests aside) a DAR
header it includes directly (a class's methods may be spread over several .cc files), includes
base/mutex.h or base/executor.h is parsed by clang++ with -Wthread-safety (syntax only, the
build's own flags):
a member read or written without holding the mutex it is ABSL_GUARDED_BY, or a function called
without the lock it ABSL_EXCLUSIVE_LOCKS_REQUIRES, is an error. g++ ignores the annotations;
this is where they are checked. Usage: check-thread-safety.py BUILD_DIR
"""
import json
import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from unity_batches import sources_of  # noqa: E402

INCLUDES = re.compile(r'^#include "base/(mutex|executor)\.h"', re.M)
DAR_HEADER = re.compile(r'^#include "([a-z_]+/[a-z_0-9]+\.h)"', re.M)
# g++ options clang does not know, and -Werror (g++ must build without a warning; clang warns
# of other things, which are not this check's business); the rest of the build's flags are kept.
DROP = {"-Wno-restrict", "-Werror"}


def command_for(entry):
    args = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
    out, skip = [], False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        if a == "-c" or a in DROP or a == entry["file"]:
            continue
        out.append(a)
    return ["clang++", "-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety",
            "-Wno-unknown-warning-option"] + out + [entry["file"]]


def check(entry):
    r = subprocess.run(command_for(entry), cwd=entry["directory"], capture_output=True, text=True)
    return entry["file"], r.returncode, r.stderr


def locks(path):
    """Whether the source at `path`, or (not a test) a DAR header it includes, locks."""
    src = path[: path.rfind("/src/") + 5] if "/src/" in path else None
    with open(path, errors="replace") as f:
        text = f.read()
    texts = [text]
    # A test is checked if it locks itself; through its headers it would be most of them.
    for h in (DAR_HEADER.findall(text) if src and not path.endswith("_test.cc") else []):
        if os.path.exists(src + h):
            with open(src + h, errors="replace") as f:
                texts.append(f.read())
    return any(INCLUDES.search(t) for t in texts)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: check-thread-safety.py BUILD_DIR")
    db_path = os.path.join(sys.argv[1], "compile_commands.json")
    try:
        with open(db_path) as f:
            db = json.load(f)
    except OSError as e:
        sys.exit(f"check-thread-safety: {db_path}: {e.strerror} (configure the build first)")
    entries, seen = [], set()
    for e in db:
        path = os.path.realpath(os.path.join(e["directory"], e["file"]))
        if path in seen or "/proto/" in path:
            continue
        seen.add(path)
        if any(locks(source) for source in sources_of(path)):
            entries.append(e)
    failed = 0
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        for path, rc, err in pool.map(check, entries):
            if rc != 0:
                failed += 1
                print(f"check-thread-safety: {path}:\n{err}", file=sys.stderr)
    print(f"check-thread-safety: {len(entries)} files, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
