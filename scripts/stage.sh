#!/usr/bin/env bash
# One stage of `make test`: runs the command and says when it started, how long it took and
# whether it failed, so that a log cut short (CI stops a run after 90 minutes) still says where
# the time went.   scripts/stage.sh NAME COMMAND [ARG...]
set -uo pipefail
name=$1
shift
start=$(date +%s)
echo "== $name: started $(date -u +%H:%M:%S)"
"$@"
rc=$?
verdict=done
if [ "$rc" -ne 0 ]; then verdict="FAILED ($rc)"; fi
echo "== $name: $verdict in $(($(date +%s) - start)) s"
exit "$rc"
