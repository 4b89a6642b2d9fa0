#!/usr/bin/env bash
# Quick start, command 2: install what is missing, build, and run the whole test
# suite twice: a release build, then an AddressSanitizer + UBSan build.
# Tests that need ../shared (reference models) skip with a message if it is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
jobs=$(nproc)
status=0

echo "== release build + tests"
scripts/build.sh build -DKVT_WERROR=ON
(cd build && ctest --output-on-failure -j"$jobs") || status=1

echo "== ASan + UBSan build + tests"
scripts/build.sh build-asan -DKVT_WERROR=ON -DKVT_SANITIZE=ON
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  KVT_SANITIZED=1 ctest --output-on-failure -j"$jobs") || status=1

if [ $status -ne 0 ]; then echo "== tests FAILED"; else echo "== all tests passed"; fi
exit $status
