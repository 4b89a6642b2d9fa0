#!/usr/bin/env bash
# bench_gpu_mm (the GPU matmul alone, per weight type): its flags are
# explained and bad values refused naming the flag; on Vulkan device 0 a tiny
# run prints each case's figure, each layer's sum and which dot-product path
# ran. Numbers are not judged (no timing).
set -u
. "${KVT_SRC:?KVT_SRC must point to the source tree}/tests/testutil.sh"
BENCH=$(dirname "$BIN")/bench_gpu_mm
[ -x "$BENCH" ] || { echo "SKIP: no $BENCH (the bench targets were not built)"; exit 77; }
says() { grep -aqF -- "$1" "$TMP/out" || { echo "  said: $(head -3 "$TMP/out"), expected '$1'" >&2; return 1; }; }

check "--help exits 0" expect_rc 0 "$BENCH" --help
for f in --device --shape --types --tokens --reps; do check "--help explains $f" says "  $f "; done
check "a bad --types is refused" expect_rc 2 "$BENCH" --types q8_0,q3_k
check "the refusal names --types" says "--types: each must be"
check "a bad --tokens is refused" expect_rc 2 "$BENCH" --tokens 0
check "the refusal names --tokens" says "--tokens: each must be 1..65535"
check "a bad --device is refused" expect_rc 2 "$BENCH" --device cpu
check "the refusal names --device" says "--device cpu: must be vulkan or vulkan:N"
check "a bad --shape is refused" expect_rc 2 "$BENCH" --shape 70b
check "the refusal names --shape" says "--shape 70b: must be tiny, 1b or 8b"

if "$BIN" info --devices 2>/dev/null | grep -q "vulkan:0"; then
  check "a tiny run" expect_rc 0 env KVT_VK_VALIDATION=1 "$BENCH" --types q8_0,q6_k --tokens 1,3 --reps 1
  for k in mm_q8_0_q_t1_ms mm_q8_0_down_t3_gb_s mm_q6_k_gate_t3_ms mm_q6_k_layer_t1_ms mm_q8_0_layer_t3_ms int_dot mm_toks mm_rows mm_rows_wide coopmat; do
    check "figure $k" says "$k="
  done
  check "it says which dot-product path ran" says "quantized dots: "
  check "it says the workgroups' rows" says " rows x 8 tokens for batches up to 8"
  check "no validation message" test "$(grep -c 'vulkan: ' "$TMP/out")" = 0
else
  kvt_test_skip_part "the Vulkan run (no device)"
fi
kvt_test_done test_bench_gpu_mm
