#!/usr/bin/env bash
# The device options of the CLI: `kvtier info --devices` lists the Vulkan
# devices (or says why there are none, exit 1); --device / $KVTIER_DEVICE of
# run, serve and eval take cpu (accepted, same output as without it) and
# vulkan[:N], which runs the model on the device when it exists (the same
# greedy completion twice, and from the cache) and is a usage error (exit 2)
# saying why when it does not; a malformed value names the flag; a Q4_1 model
# runs on the device; -ngl with no --device runs on the first GPU as
# llama.cpp's -ngl does (never on a CPU-type device such as lavapipe: the CPU
# engine then, saying why); a model the GPU engine does not run (heads wider than
# 256) is refused naming why; q8_0 KV runs on the device
# and holds about twice f16's tokens in the same --kv-active.
set -u
. "${KVT_SRC:?KVT_SRC must point to the source tree}/tests/testutil.sh"
says() { grep -aqF -- "$1" "$TMP/out" || { echo "  said: $(head -3 "$TMP/out"), expected '$1'" >&2; return 1; }; }

has_dev=0
"$BIN" info --devices >"$TMP/devices" 2>&1 && has_dev=1
cp "$TMP/devices" "$TMP/out"
if [ $has_dev = 1 ]; then
  check "info --devices lists device 0" says "vulkan:0"
  for field in type vendor driver "memory heap 0" "subgroup size" fp16 int8; do
    check "info --devices shows $field" says "$field"
  done
  if grep -q "type cpu" "$TMP/devices"; then
    check "info --devices marks a CPU-type device as never picked by -ngl" says "(a CPU: -ngl alone never picks it)"
  fi
  KVT_VK_AUTO_CPU=1 "$BIN" info --devices >"$TMP/out" 2>&1
  check "info --devices names each GPU in llama.cpp's numbering" says "(llama.cpp's Vulkan0; -ngl with no --device runs here)"
  cp "$TMP/devices" "$TMP/out"
else
  check "info --devices says why there is none" says "Vulkan devices: none: "
  refusal="no Vulkan device was found"
fi

"$BIN" mkmodel -o "$TMP/m.gguf" >/dev/null 2>&1 || bad "mkmodel"
for cmd in run serve; do
  if [ $has_dev = 0 ]; then
    check "$cmd --device vulkan refused" expect_rc 2 "$BIN" $cmd -m "$TMP/m.gguf" --device vulkan
    check "$cmd --device vulkan says why" says "$refusal"
  fi
  check "$cmd --device bogus names the flag" expect_rc 2 "$BIN" $cmd -m "$TMP/m.gguf" --device gpu
  check "$cmd --device bogus message" says "--device must be cpu, vulkan or vulkan:N"
  check "$cmd \$KVTIER_DEVICE=vulkan:1x refused" expect_rc 2 env KVTIER_DEVICE=vulkan:1x "$BIN" $cmd -m "$TMP/m.gguf"
  check "$cmd \$KVTIER_DEVICE named" says "\$KVTIER_DEVICE must be cpu"
done
if [ $has_dev = 0 ]; then
  check "eval --device vulkan:0 refused" expect_rc 2 "$BIN" eval -m "$TMP/m.gguf" --device vulkan:0 hi
  check "eval says why" says "$refusal"
  check "eval \$KVTIER_DEVICE=vulkan refused" expect_rc 2 env KVTIER_DEVICE=vulkan "$BIN" eval -m "$TMP/m.gguf" hi
else
  export KVT_VK_VALIDATION=1
  rc=0
  "$BIN" run -m "$TMP/m.gguf" -p "hello there" -n 8 --temp 0 --device vulkan >"$TMP/g1" 2>"$TMP/g1.err" || rc=$?
  check "run --device vulkan exits 0" is "$rc" 0
  check "its completion is not empty" test -s "$TMP/g1"
  KVTIER_DEVICE=vulkan:0 "$BIN" run -m "$TMP/m.gguf" -p "hello there" -n 8 --temp 0 >"$TMP/g2" 2>/dev/null
  check "\$KVTIER_DEVICE=vulkan:0 gives the same completion" cmp -s "$TMP/g1" "$TMP/g2"
  # -ngl with no --device, as llama.cpp's users offload: the first GPU, never a CPU-type device (lavapipe)
  # unless KVT_VK_AUTO_CPU=1; --device cpu or $KVTIER_DEVICE=cpu keep the CPU, saying -ngl is ignored
  "$BIN" run -m "$TMP/m.gguf" -p "hello there" -n 8 --temp 0 --device cpu >"$TMP/c1" 2>/dev/null
  rc=0
  "$BIN" run -m "$TMP/m.gguf" -p "hello there" -n 8 --temp 0 -ngl 99 >"$TMP/n1" 2>"$TMP/out" || rc=$?
  check "run -ngl 99 with no --device exits 0" is "$rc" 0
  if grep -q "type cpu" "$TMP/devices" && ! grep -Eq "type (discrete|integrated|virtual|other)" "$TMP/devices"; then
    check "with only CPU-type devices, -ngl is ignored saying why" says "no GPU was found (Vulkan lists only"
    check "... and the CPU engine gives the CPU's completion" cmp -s "$TMP/c1" "$TMP/n1"
  else
    check "with a GPU, -ngl puts the model on it" says "with no --device: the model runs on vulkan:"
  fi
  KVT_VK_AUTO_CPU=1 "$BIN" run -m "$TMP/m.gguf" -p "hello there" -n 8 --temp 0 -ngl 99 >"$TMP/n2" 2>"$TMP/out"
  check "KVT_VK_AUTO_CPU=1: -ngl picks device 0" says "-ngl 99 with no --device: the model runs on vulkan:"
  check "... and gives --device vulkan's completion" cmp -s "$TMP/g1" "$TMP/n2"
  KVT_VK_AUTO_CPU=1 "$BIN" eval -m "$TMP/m.gguf" -n 2 -ngl 1 hi >/dev/null 2>"$TMP/out"
  check "eval -ngl 1 picks it too" says "kvtier eval: -ngl 1 with no --device: the model runs on vulkan:"
  for how in "--device cpu" "KVTIER_DEVICE=cpu"; do
    if [ "$how" = "--device cpu" ]; then
      KVT_VK_AUTO_CPU=1 "$BIN" run -m "$TMP/m.gguf" -p "hello there" -n 8 --temp 0 -ngl 99 --device cpu >"$TMP/n3" 2>"$TMP/out"
    else
      KVT_VK_AUTO_CPU=1 KVTIER_DEVICE=cpu "$BIN" run -m "$TMP/m.gguf" -p "hello there" -n 8 --temp 0 -ngl 99 \
        >"$TMP/n3" 2>"$TMP/out"
    fi
    check "$how -ngl 99: ignored, saying so" says "is ignored: the model runs on the CPU, as --device cpu"
    check "$how -ngl 99: the CPU's completion" cmp -s "$TMP/c1" "$TMP/n3"
  done
  # llama.cpp's device names and GPU numbering: VulkanN is its N-th GPU, discrete ones first (with none,
  # Vulkan0 is device 0, as llama.cpp falls back to it); -mg picks among them with -ngl
  "$BIN" run -m "$TMP/m.gguf" -p "hello there" -n 8 --temp 0 -dev Vulkan0 >"$TMP/n4" 2>/dev/null
  check "-dev Vulkan0 runs on a device: --device vulkan's completion" cmp -s "$TMP/g1" "$TMP/n4"
  check "--device Vulkan9 refused naming llama.cpp's numbering" expect_rc 2 "$BIN" run -m "$TMP/m.gguf" -p hi \
    --device Vulkan9
  check "... saying why" says "llama.cpp's Vulkan9 is GPU 9 counting from 0"
  KVT_VK_AUTO_CPU=1 "$BIN" run -m "$TMP/m.gguf" -p "hello there" -n 8 --temp 0 -ngl 99 -mg 0 >"$TMP/n5" 2>"$TMP/out"
  check "-ngl 99 -mg 0 picks GPU 0" says "with no --device: the model runs on vulkan:"
  check "... with --device vulkan's completion" cmp -s "$TMP/g1" "$TMP/n5"
  check "-mg past the GPUs refused" expect_rc 2 env KVT_VK_AUTO_CPU=1 "$BIN" run -m "$TMP/m.gguf" -p hi -ngl 99 -mg 9
  check "... naming it" says "GPU 9 (--main-gpu, or --tensor-split's share): this machine has"
  KVT_VK_AUTO_CPU=1 "$BIN" run -m "$TMP/m.gguf" -p "hello there" -n 8 --temp 0 -ngl 0 >/dev/null 2>"$TMP/out"
  check "-ngl 0 with no --device stays on the CPU, with nothing to say" sh -c "! grep -q 'ngl' '$TMP/out'"
  check "eval --device vulkan" expect_rc 0 "$BIN" eval -m "$TMP/m.gguf" -n 2 --device vulkan hi
  check "no validation message" sh -c "! grep -qi 'validation' '$TMP/g1.err'"
  "$BIN" mkmodel -o "$TMP/q41.gguf" --type q4_1 >/dev/null 2>&1 || bad "mkmodel q4_1"
  check "a Q4_1 model runs on the GPU" expect_rc 0 "$BIN" run -m "$TMP/q41.gguf" -p hi -n 2 --temp 0 --device vulkan
  "$BIN" mkmodel -o "$TMP/wide.gguf" --dim 512 --heads 1 --kv-heads 1 >/dev/null 2>&1 || bad "mkmodel wide heads"
  check "a model with heads of 512 on the GPU is refused" expect_rc 1 "$BIN" run -m "$TMP/wide.gguf" -p hi -n 1 \
    --device vulkan
  check "... naming why" says "heads wider than 256"
  # q8_0 KV on the GPU: it runs, and as its pages take 34 bytes per 32 values against f16's 64,
  # the same --kv-active holds 64/34 (1.88) times the tokens and sessions (serve's start-up line)
  rc=0
  "$BIN" run -m "$TMP/m.gguf" -p "hello there" -n 8 --temp 0 --device vulkan --kv-type q8_0 >"$TMP/q8" 2>"$TMP/q8.err" ||
    rc=$?
  check "run --device vulkan --kv-type q8_0 exits 0" is "$rc" 0
  check "its completion is not empty" test -s "$TMP/q8"
  check "no validation message with q8_0 KV" sh -c "! grep -qi 'validation' '$TMP/q8.err'"
  t0_tokens() { sed -n 's/.*KV capacity T0 active \([0-9]*\) tokens.*/\1/p' "${KVT_LOG[$1]}" | head -1; }
  KVT_SERVE_ARGS=(-m "$TMP/m.gguf" --host 127.0.0.1 -t 1 --device vulkan --parallel 1 --kv-active 512K)
  kvt_start_server F16
  kvt_start_server Q8 --kv-type q8_0
  f16=$(t0_tokens F16) q8=$(t0_tokens Q8)
  kvt_stop_server F16
  kvt_stop_server Q8
  echo "T0 at --kv-active 512K: ${f16:-?} tokens with f16 KV, ${q8:-?} with q8_0"
  check "q8_0 KV holds 1.8x or more f16's T0 tokens in the same --kv-active (${q8:-?} against ${f16:-?})" \
    test "${q8:-0}" -gt 0 -a "$((10 * ${q8:-0}))" -ge "$((18 * ${f16:-1}))"

  check "serve --approximate-reuse on the GPU refused" expect_rc 2 "$BIN" serve -m "$TMP/m.gguf" --device vulkan --approximate-reuse
  check "... saying it runs on the CPU engine only" says "CPU engine only"
  check "a device index past the last refused" expect_rc 2 env KVTIER_DEVICE=vulkan:99 "$BIN" run -m "$TMP/m.gguf" -p hi
  check "it names the index" says "there is no Vulkan device 99"
fi

# cpu changes nothing: the same greedy completion (stdout) with and without it
rc=0
"$BIN" run -m "$TMP/m.gguf" -p "hello there" -n 8 --temp 0 --device cpu >"$TMP/with" 2>/dev/null || rc=$?
check "run --device cpu exits 0" is "$rc" 0
"$BIN" run -m "$TMP/m.gguf" -p "hello there" -n 8 --temp 0 >"$TMP/without" 2>/dev/null
check "the completion is not empty" test -s "$TMP/without"
check "--device cpu gives the same completion" cmp -s "$TMP/with" "$TMP/without"
check "eval --device cpu" expect_rc 0 env KVTIER_DEVICE=cpu "$BIN" eval -m "$TMP/m.gguf" -n 2 hi
kvt_test_done test_gpu_cli
