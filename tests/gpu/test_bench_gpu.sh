#!/usr/bin/env bash
# bench_gpu (the mission's benchmark) end to end on a tiny model: on the CPU,
# and on Vulkan device 0 when there is one. Each warm run of phase 2 restores
# the whole prefix from the tier it names (T0, T1, T2 after a restart, T3 from
# a Redis when redis-server is installed) and computes one token; on a device,
# each restored run is one batched copy and the pinned-copy figure is there.
# Phase 3's small T0 sends resumed sessions through T1 and computes exactly
# what the unlimited T0 computes. Every figure has its key=value line; bad
# flags are refused naming the flag; --make-model makes a shape's model once.
# Numbers are not judged (no timing).
set -u
. "${KVT_SRC:?KVT_SRC must point to the source tree}/tests/testutil.sh"
BENCH=$(dirname "$BIN")/bench_gpu
[ -x "$BENCH" ] || { echo "SKIP: no $BENCH (the bench targets were not built)"; exit 77; }
says() { grep -aqF -- "$1" "$TMP/out" || { echo "  said: $(head -3 "$TMP/out"), expected '$1'" >&2; return 1; }; }
val() { grep -a -m1 "^$1=" "$TMP/out" | cut -d= -f2-; }

# flags
check "--help exits 0" expect_rc 0 "$BENCH" --help
for f in --device --model --shape --wtype --prefix --reps --redis --redis-key --disk --sessions --t0-sessions \
  --session-tokens --rounds --append --gen --phase --make-model --threads --block; do
  check "--help explains $f" says "  $f "
done
check "a bad --device is refused" expect_rc 2 "$BENCH" --device gpu
check "the refusal names --device" says "--device gpu: must be cpu, vulkan or vulkan:N"
check "--sessions 0 is refused" expect_rc 2 "$BENCH" --sessions 0
check "the refusal names --sessions" says "--sessions 0: must be a whole number"
check "--t0-sessions over --sessions is refused" expect_rc 2 "$BENCH" --sessions 2 --t0-sessions 3
check "the refusal names --t0-sessions" says "--t0-sessions"
check "an unknown flag is refused" expect_rc 2 "$BENCH" --frobnicate 1
check "--shape names its values" expect_rc 2 "$BENCH" --shape 70b
check "the refusal names --shape" says "--shape 70b: must be tiny, 1b or 8b"
check "--wtype names its values" expect_rc 2 "$BENCH" --wtype q3_k
check "the refusal names --wtype" says "--wtype q3_k: must be f16, q8_0, q4_0, q4_k_m or q5_k_m"
# --make-model: the shape's model into bench/out/ (of the working directory), once
check "--make-model makes the tiny model" expect_rc 0 bash -c "cd '$TMP' && '$BENCH' --make-model --shape tiny"
check "into bench/out" test -s "$TMP/bench/out/bench-gpu-tiny.gguf"
check "saying so" says "generating bench/out/bench-gpu-tiny.gguf"
check "--make-model again keeps it" expect_rc 0 bash -c "cd '$TMP' && '$BENCH' --make-model --shape tiny"
check "without generating" is "$(cat "$TMP/out")" ""

# mkmodel's default vocabulary (259 rows): the benchmark's random prompts must stay inside a small one
"$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 --ctx 2048 \
  >/dev/null 2>&1 || bad "mkmodel"
redis=()
if command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then
  kvt_start_redis
  head -c 32 /dev/urandom >"$TMP/key" && chmod 600 "$TMP/key"
  redis=(--redis "redis://127.0.0.1:$RPORT" --redis-key "$TMP/key")
else
  kvt_test_skip_part "T3 (no redis-server)"
fi
P=64 # the prefix: two 32-token blocks

# run_bench NAME DEVICE: both phases, small, into $TMP/out; then the checks every device shares
run_bench() {
  local name=$1 dev=$2
  check "$name: bench_gpu runs" expect_rc 0 "$BENCH" --device "$dev" --model "$TMP/m.gguf" --threads 1 \
    --prefix $P --reps 2 --disk "$TMP/kv-$name" "${redis[@]}" \
    --sessions 4 --t0-sessions 1 --session-tokens 64 --rounds 2 --append 8 --gen 2
  local t tiers=(t0 t1 t2)
  [ ${#redis[@]} -gt 0 ] && tiers+=(t3)
  for t in "${tiers[@]}"; do
    check "$name: $t restores the whole prefix" is "$(val ${t}_tokens)" $P
    check "$name: $t computes one token" is "$(val ${t}_computed)" 1
    check "$name: $t has a TTFT" says "${t}_ttft_ms="
    check "$name: $t has a restore time" says "${t}_restore_ms="
  done
  for k in cold_prefill_ms cold_ttft_ms t1_restore_gb_s p3_tiered_ttft_p50_ms p3_unlimited_ttft_p50_ms p3_ttft_ratio; do
    check "$name: figure $k" says "$k="
  done
  check "$name: phase 3 computes what an unlimited T0 computes" is "$(val p3_computed_ratio)" 1
  check "$name: phase 3's resumed sessions came from T1" says "resumed tokens from T0/T1/T2/T3 0/"
}

run_bench cpu cpu
check "cpu: no page copies on the CPU" is "$(val t1_io_submits)" 0
check "cpu: no pinned copy on the CPU" says "pinned host-to-device copy: not measured on the CPU"

if "$BIN" info --devices 2>/dev/null | grep -q "vulkan:0"; then
  run_bench vulkan vulkan:0
  for t in t1 t2; do
    check "vulkan: $t restores as one run" is "$(val ${t}_runs_in)" 1
    check "vulkan: $t restores in one submission" is "$(val ${t}_io_submits)" 1
  done
  check "vulkan: T0 needs no copy" is "$(val t0_io_submits)" 0
  check "vulkan: the pinned copy was measured" says "pinned_copy_gb_s="
  check "vulkan: and set against T1" says "t1_vs_pinned="
else
  kvt_test_skip_part "the Vulkan run (no device)"
fi
kvt_test_done test_bench_gpu
