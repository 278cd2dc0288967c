"""What a translation unit of a compile database compiles, unity builds included.

In a unity build (CMakeLists.txt, DAR_UNITY_BUILD) compile_commands.json names each batch of a
target's sources (CMakeFiles/NAME.dir/Unity/unity_N_cxx.cxx, which #includes them) in place
of the sources; check-tidy.py and check-thread-safety.py look through a batch to its sources.
"""
import os
import re

UNITY_BATCH = re.compile(r"/Unity/unity_\d+_cxx\.cxx$")
UNITY_INCLUDE = re.compile(r'^#include "([^"]+)"', re.M)


def sources_of(path):
    """The sources the translation unit at `path` compiles: a batch's, or the file itself."""
    if not UNITY_BATCH.search(path):
        return [path]
    with open(path) as f:
        return [os.path.realpath(p) for p in UNITY_INCLUDE.findall(f.read())]
