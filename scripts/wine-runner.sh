#!/bin/bash
# The runner cargo uses for Windows test binaries (CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER,
# set by scripts/cross-check.sh): runs one under Wine, its output unchanged.
#
# One retry, for one case only: the binary exited non-zero before writing a byte to stdout. A
# Rust test binary's first act is to print "running N tests", so such a binary never reached its
# tests; under Wine 8 that happens now and then when a process starts (seen once in CI: status
# 1, no output, then 5 of 5 clean runs of the same binary; earlier as Win32 error 1359 from
# CreateProcess). A real start failure fails the second time too and is reported as it is; a
# test that fails has printed its results, so it is never retried. The retry is said on stderr.
set -u
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
for attempt in 1 2; do
  : >"$out"
  : >"$err"
  wine "$@" >"$out" 2>"$err"
  rc=$?
  cat "$out"
  cat "$err" >&2
  if [ "$rc" -ne 0 ] && [ ! -s "$out" ] && [ "$attempt" = 1 ]; then
    echo "wine-runner: $(basename "$1") exited with status $rc before printing anything (a start that failed under Wine); running it once more" >&2
    continue
  fi
  exit "$rc"
done
