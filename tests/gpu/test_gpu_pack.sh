#!/usr/bin/env bash
# The GPU machine's run, rehearsed on lavapipe: bench/gpu-pack.sh packs the
# stripped binaries and every library they link besides the C library into one
# file small enough to carry, and bench/gpu.sh runs from that pack on a machine
# that has none of those libraries (a stand-in ldconfig that knows none of
# them, so every one comes from the pack): devices, one GPU test with the
# validation layer, the matmul bench, phases 2 and 3 on the tiny shape.
# No .deb files (the test fetches nothing): the loader is this machine's.
set -u
. "${KVT_SRC:?KVT_SRC must point to the source tree}/tests/testutil.sh"
BUILD=$(dirname "$BIN")
[ -x "$BUILD/bench_gpu" ] || { echo "SKIP: no $BUILD/bench_gpu (the bench targets were not built)"; exit 77; }
[ "${KVT_SANITIZED:-0}" = 1 ] && { echo "SKIP: sanitized build (its binaries are the release ones' checks, slower)"; exit 77; }
"$BIN" info --devices 2>/dev/null | grep -q "vulkan:0" || { echo "SKIP: no Vulkan device (lavapipe not installed)"; exit 77; }
says() { grep -aqF -- "$1" "$2" || { echo "  $2 said: $(tail -3 "$2"), expected '$1'" >&2; return 1; }; }

check "gpu-pack.sh packs" expect_rc 0 env BUILD="$BUILD" PACK="$TMP/carry" NO_DEBS=1 TMPDIR="$TMP" \
  bash "$KVT_SRC/bench/gpu-pack.sh"
check "into one file" test -s "$TMP/carry/kvtier-gpu.tar.gz"
check "saying what it holds" says "libraries and 0 .deb files" "$TMP/out"
mb=$(($(stat -c %s "$TMP/carry/kvtier-gpu.tar.gz") / 1048576))
check "small enough to carry with the tree (${mb} MiB)" test "$mb" -lt 40
mkdir -p "$TMP/x" && tar -xzf "$TMP/carry/kvtier-gpu.tar.gz" -C "$TMP/x"
for b in kvtier bench_gpu bench_gpu_mm test_gpu_device; do
  check "the pack holds $b" test -x "$TMP/x/bin/$b"
done
# with the pack's libraries first, nothing but the C library comes from this machine
outside=$(for b in "$TMP"/x/bin/*; do LD_LIBRARY_PATH="$TMP/x/lib" ldd "$b"; done |
  awk '$2 == "=>" { print $3 }' | grep -v "^$TMP/x/lib/" | xargs -rn1 basename | sort -u |
  grep -Ev '^(libc|libm|libdl|libpthread|librt|libresolv)\.so' | tr '\n' ' ')
check "every other library is in the pack" is "$outside" ""
check "cJSON among them" test -f "$TMP/x/lib/libcjson.so.1"

# gpu.sh from the pack, on a machine whose ldconfig knows none of the libraries
mkdir -p "$TMP/fake" && printf '#!/bin/sh\nexit 0\n' >"$TMP/fake/ldconfig" && chmod +x "$TMP/fake/ldconfig"
mkdir -p "$TMP/tree/bench" && cp "$KVT_SRC/bench/gpu.sh" "$KVT_SRC/bench/prompt_lib.sh" "$TMP/tree/bench/"
check "gpu.sh runs from the pack" expect_rc 0 env PATH="$TMP/fake:$PATH" PACK="$TMP/carry" SHAPE=tiny \
  GPU_TESTS=test_gpu_device MM_TYPES=f16 NO_REDIS=1 OUT="$TMP/res" TMPDIR="$TMP" BUDGET_S=400 \
  bash "$TMP/tree/bench/gpu.sh"
S=$TMP/res/summary.txt
check "its binaries came from the pack" says "pack: binaries from $TMP/kvt-gpu-pack." "$S"
check "with the libraries the machine lacked" says "libcjson.so.1" "$S"
check "the device was listed" says "devices: ok" "$S"
check "the GPU test passed" says "test_gpu_device: ok" "$S"
check "it says whether the device has the tensor-core matmul" says "coopmat: vulkan:0 " "$S"
check "the single stream ran as shipped and with every list waited for" says "ss: ok" "$S"
check "phase 2 ran" says "bench_phase2: ok" "$S"
check "phase 3 ran" says "bench_phase3: ok" "$S"
check "and the whole run passed" says "gpu.sh: ok" "$S"
check "phase 2's figures are in results.txt" says "bench_phase2.t1_runs_in=" "$TMP/res/results.txt"
check "and the single stream's, per variant" says "ss.inflight1.1.decode_tok_s=" "$TMP/res/results.txt"
check "it left no folders behind" is "$(ls -d "$TMP"/kvt-* 2>/dev/null)" ""
kvt_test_done test_gpu_pack
