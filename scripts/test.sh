#!/usr/bin/env bash
# Quick start, command 2: install what is missing, build, and run the whole test
# suite twice — a release build, then an AddressSanitizer + UBSan build — and the
# threaded tests a third time under ThreadSanitizer.
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

echo "== ThreadSanitizer build + the threaded tests (pool, kernels, disk and remote writers, server, q8_0 attention scratch)"
scripts/build.sh build-tsan -DKVT_WERROR=ON -DKVT_TSAN=ON
# halt_on_error: a race in a server process kills it, which fails the test that drives it.
# -j as the other passes: many of these tests wait (on a server, a Redis failover, a deadline)
# more than they compute, and each test takes its own ports and temporary folder. Three server tests
# are left out: they check what one request at a time gets (prompt shaping for /infill, llama-server's
# fields, the Responses history's ids) through the same handlers and engine steps every other server
# test drives here, and CI's 25 minutes have no room for a third pass of them
(cd build-tsan && TSAN_OPTIONS="halt_on_error=1 exitcode=66" \
  ctest --output-on-failure -j"$jobs" -R "threadpool|test_ops|tier_disk|disk_ckpt|tier_remote|cache_disk|disk_restart|server|scheduler|^test_kv_q8" \
    -E "test_server_infill|test_server_llama$|test_server_responses_history") || status=1

if [ $status -ne 0 ]; then echo "== tests FAILED"; else echo "== all tests passed"; fi
exit $status
