#!/usr/bin/env python3
"""The layers of src/ and who may include whom: no arrow runs back up.

Each directory of src/ is a layer; a file may include headers of its own layer and of the
layers listed for it below (generated protos, "dar/v1/...", belong to wire). Tests may also
include what their LAYERS_FOR_TESTS entry adds (a lab test drives a real agent, a controller
test a real relay). Anything else fails with the file, the line and the include.
Usage: check-layers.py [SRC_DIR]
"""
import os
import re
import sys

LAYERS = {
    "base": set(),
    "core": {"base"},
    "net": {"base", "core"},
    "wire": {"base", "core"},
    "learn": {"base", "core"},
    "sim": {"base", "core"},
    "security": {"base", "core", "net", "wire"},
    "agent": {"base", "core", "net", "security", "wire"},
    "control": {"base", "core", "learn", "net", "security", "wire"},
    "lab": {"base", "core", "net", "security", "wire"},
    "train": {"base", "core", "learn", "sim"},
    "cli": {"base", "core", "net", "wire", "learn", "sim", "security", "agent", "control", "lab",
            "train"},
}
LAYERS_FOR_TESTS = {"lab": {"agent"}, "control": {"agent"}}
INCLUDE = re.compile(r'^#include "([^"/]+)/', re.M)


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else "src"
    problems = []
    for layer in sorted(os.listdir(src)):
        path = os.path.join(src, layer)
        if not os.path.isdir(path):
            continue
        if layer not in LAYERS:
            problems.append(f"{path}: a directory that is no layer (add it to {sys.argv[0]})")
            continue
        for root, _, files in os.walk(path):
            for name in sorted(files):
                if not name.endswith((".cc", ".h")):
                    continue
                file = os.path.join(root, name)
                test = name.endswith("_test.cc") or "test_util" in name
                allowed = LAYERS[layer] | {layer} | (LAYERS_FOR_TESTS.get(layer, set())
                                                     if test else set())
                text = open(file, encoding="utf-8").read()
                for m in INCLUDE.finditer(text):
                    target = "wire" if m.group(1) == "dar" else m.group(1)
                    if target not in LAYERS or target in allowed:
                        continue  # a library's header, or an allowed layer
                    line = text.count("\n", 0, m.start()) + 1
                    problems.append(f"{file}:{line}: {layer} includes {target} "
                                    f"({m.group(0)[10:]}): {layer} may include "
                                    f"{', '.join(sorted(allowed - {layer})) or 'nothing of DAR'}")
    for p in problems:
        print(p)
    print(f"check-layers: {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
