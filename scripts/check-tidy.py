#!/usr/bin/env python3
"""clang-tidy's bugprone and performance checks (.clang-tidy) over DAR's own code.

Every non-generated source under src/ and bench/ in BUILD/compile_commands.json but the tests
(*_test.cc; the test helpers are checked) is checked with the build's own flags, and the DAR
headers it includes with it (HeaderFilterRegex in .clang-tidy); any finding fails the check.
In a unity build (DAR_UNITY_BUILD) the database names each batch of a target's sources
(Unity/unity_N_cxx.cxx, which includes them): a batch is checked whole, parsed once as the
compiler does, if one of its sources is to be checked, and findings in tests are dropped.
Tests are left out: they are as many files again, mostly GoogleTest macros, and would double
the time for little. So is what builds against LibTorch (src/train and dar-train's main):
Debian's LibTorch headers do not compile with clang 14. A finding that is wrong is
silenced where it is, with NOLINT(check) and the reason beside it.
Usage: check-tidy.py BUILD_DIR
"""
import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from unity_batches import UNITY_BATCH, sources_of  # noqa: E402

FINDING = re.compile(r"^(/[^:]+):(\d+):(\d+): (warning|error): (.*)$", re.M)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: check-tidy.py BUILD_DIR")
    tidy = shutil.which("clang-tidy") or shutil.which("clang-tidy-14")
    if tidy is None:
        sys.exit("check-tidy: clang-tidy not found (scripts/install-deps.sh installs it)")
    build = os.path.abspath(sys.argv[1])  # clang-tidy runs from the repository root
    db_path = os.path.join(build, "compile_commands.json")
    try:
        with open(db_path) as f:
            db = json.load(f)
    except OSError as e:
        sys.exit(f"check-tidy: {db_path}: {e.strerror} (configure the build first)")
    root = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    files = sorted({
        os.path.realpath(os.path.join(e["directory"], e["file"])) for e in db
        if "/torch/" not in e.get("command", " ".join(e.get("arguments", [])))
    })

    def checked(source):
        return source.startswith((root + "/src/", root + "/bench/")) and \
            not source.endswith("_test.cc")

    files = [f for f in files if any(checked(s) for s in sources_of(f))]

    def check(path):
        # -Wno-error: g++ builds without a warning (-Werror); clang's own warnings are not
        # findings of these checks.
        r = subprocess.run([tidy, "-p", build, "--quiet", "--extra-arg=-Wno-error", path],
                           cwd=root, capture_output=True, text=True)
        return path, r.returncode, r.stdout + r.stderr

    findings = {}
    crashed = []
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        for path, rc, out in pool.map(check, files):
            for m in FINDING.finditer(out):
                if m.group(1).endswith("_test.cc"):
                    continue  # a test batched with a checked source
                if UNITY_BATCH.search(m.group(1)):
                    continue  # a batch is made of includes of .cc files (suspicious-include)
                # A header's finding is reported by every file that includes it: once is enough.
                findings.setdefault((m.group(1), int(m.group(2)), int(m.group(3))), m.group(0))
            if rc != 0 and not FINDING.search(out):
                crashed.append((path, out.strip()[-2000:]))
    for key in sorted(findings):
        print(findings[key])
    for path, out in crashed:
        print(f"check-tidy: clang-tidy failed on {path}:\n{out}", file=sys.stderr)
    print(f"check-tidy: {len(files)} files, {len(findings)} findings")
    sys.exit(1 if findings or crashed else 0)


if __name__ == "__main__":
    main()
