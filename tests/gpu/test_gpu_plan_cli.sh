#!/usr/bin/env bash
# The memory plan from the command line, on Vulkan device 0 (lavapipe here),
# its memory made small with KVT_VK_MEM_LIMIT: run and serve on a GPU without
# --kv-active plan the pool and say so on their start-up line (device memory,
# weights, activations, KV pool, its tokens and sessions of the context); a
# --kv-active that does not fit is refused naming the largest that does, and
# that one runs, giving the planned run's text, also when the kernels' KV
# bindings reach fewer pages than the memory holds; eval's pool (prompt and
# -n) that does not fit is refused naming only flags eval takes; a page over the device's
# largest binding is refused by run, eval and serve naming the largest --block-size that fits,
# which runs, and by rag prewarm naming the index's block size; a context past the KV bindings' reach is refused naming the longest context and a
# block size whose pages fill the bindings closer, which runs; a context too long for
# the memory is refused naming the longest that fits, and that one runs; a model that does not fit is
# refused naming the largest -ngl that would; -ngl below the layer count runs
# the other layers on the CPU (partial offload) on run, eval and serve, saying
# so on the start-up line, with the all-GPU run's greedy text here, and there a
# --kv-active past the KV bindings' reach is refused naming the largest with
# both shares of a page counted, which runs; -ngl 99
# runs. The validation layer is on and no validation message may appear.
set -u
[ -n "${TSAN_OPTIONS:-}" ] && { echo "SKIP: not under ThreadSanitizer (no GPU test is)"; exit 77; }
. "${KVT_SRC:?KVT_SRC must point to the source tree}/tests/testutil.sh"
"$BIN" info --devices >"$TMP/devices" 2>&1 || { echo "SKIP: no Vulkan device: $(head -1 "$TMP/devices")"; exit 77; }
export KVT_VK_VALIDATION=1
says() { grep -aqF -- "$1" "$TMP/err" || { echo "  said: $(grep -a kvtier "$TMP/err" | tail -2), expected '$1'" >&2; return 1; }; }

"$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 --vocab 800 --type f16 \
  2>/dev/null || bad "mkmodel"
RUN=("$BIN" run -m "$TMP/m.gguf" -p "hello there, tiers" -n 6 --temp 0 --ctx 128 --device vulkan)

rc=0
"${RUN[@]}" >"$TMP/planned" 2>"$TMP/err" || rc=$?
cat "$TMP/err" >>"$TMP/all"
check "run on the GPU without --kv-active" is "$rc" 0
check "... plans the pool and says so" says "(planned"
check "... with the device's memory and the share" says "the engine's share 0.90 = "
for w in "weights " "activations " "KV pool " " tokens, " " sessions of 128 tokens"; do
  check "... naming its$w" says "$w"
done

# a device of 200 MiB, 180 of it the engine's: a pool of 100 MiB does not fit
rc=0
KVT_VK_MEM_LIMIT=$((200 << 20)) "${RUN[@]}" --kv-active 100M >/dev/null 2>"$TMP/err" || rc=$?
cat "$TMP/err" >>"$TMP/all"
check "a --kv-active over the budget fails" is "$rc" 1
check "... naming the pool" says "a KV pool of 12800 pages (100.0 MiB, --kv-active) does not fit"
check "... and the budget" says "the 180.0 MiB that --gpu-memory-fraction 0.90 of this device's 200.0 MiB allows"
fit=$(grep -ao -- '--kv-active [0-9]*)' "$TMP/err" | tr -dc 0-9)
check "... and the largest pool that fits" test -n "$fit"
rc=0
KVT_VK_MEM_LIMIT=$((200 << 20)) "${RUN[@]}" --kv-active "$fit" -ngl 99 >"$TMP/given" 2>"$TMP/err" || rc=$?
cat "$TMP/err" >>"$TMP/all"
check "that pool runs (with -ngl 99)" is "$rc" 0
check "... and says it was given" says "(given)"
check "... giving the planned run's text" cmp -s "$TMP/planned" "$TMP/given"

# eval sizes its pool from the prompt and -n, and has neither --kv-active nor --ctx-size: a pool that does not
# fit is refused in its terms (tokens, -n), naming no flag eval would reject
rc=0
KVT_VK_MEM_LIMIT=$((200 << 20)) "$BIN" eval -m "$TMP/m.gguf" --device vulkan -n 1000000 hi >/dev/null 2>"$TMP/err" ||
  rc=$?
cat "$TMP/err" >>"$TMP/all"
check "eval whose KV does not fit fails" is "$rc" 1
check "... naming the pool in tokens" says "tokens) does not fit"
check "... and what eval can change" says "the prompt's 2 and -n 1000000: a shorter prompt, a smaller -n"
check "... naming neither --kv-active nor --ctx-size" sh -c "! grep -aqE -- '--kv-active|--ctx' '$TMP/err'"

# bindings of 1 MiB reach 4 x 128 pages of 8 KiB, far fewer than the memory holds: the largest pool
# the refusal names is held to that reach, and it runs (a larger one would be refused again)
rc=0
KVT_VK_MAX_BINDING=$((1 << 20)) KVT_VK_MEM_LIMIT=$((200 << 20)) "${RUN[@]}" --kv-active 100M >/dev/null 2>"$TMP/err" ||
  rc=$?
cat "$TMP/err" >>"$TMP/all"
check "a --kv-active over the budget with small bindings fails" is "$rc" 1
check "... naming the largest pool that fits, held to the bindings' reach" \
  says "fits (held to what the kernels' KV bindings reach) is 512 pages (--kv-active 4194304)"
rc=0
KVT_VK_MAX_BINDING=$((1 << 20)) KVT_VK_MEM_LIMIT=$((200 << 20)) "${RUN[@]}" --kv-active 4194304 >"$TMP/given" \
  2>"$TMP/err" || rc=$?
cat "$TMP/err" >>"$TMP/all"
check "that pool runs" is "$rc" 0
check "... giving the planned run's text" cmp -s "$TMP/planned" "$TMP/given"

# a page over the device's largest binding: run, eval and serve each refuse it naming the --block-size
# they take and the largest that fits (pages of 256 tokens x 256 bytes in bindings of 64 KiB), and
# eval adds no advice about its prompt, which would not help; that block size runs
for cmd in run eval serve; do
  rc=0
  case $cmd in
  run) KVT_VK_MAX_BINDING=65536 "${RUN[@]}" --block-size 512 >/dev/null 2>"$TMP/err" || rc=$? ;;
  eval) KVT_VK_MAX_BINDING=65536 "$BIN" eval -m "$TMP/m.gguf" --device vulkan --block-size 512 -n 1 hi \
    >/dev/null 2>"$TMP/err" || rc=$? ;;
  serve) KVT_VK_MAX_BINDING=65536 "$BIN" serve -m "$TMP/m.gguf" --port 0 --device vulkan --block-size 512 \
    >"$TMP/err" 2>&1 || rc=$? ;;
  esac
  cat "$TMP/err" >>"$TMP/all"
  check "$cmd: a page over one binding fails" is "$rc" 1
  check "... naming the flag and the largest block that fits" says "(512 tokens) is larger than this device's largest \
binding (65536 bytes); use a --block-size of at most 256"
  [ "$cmd" != eval ] || check "... with no advice on its prompt" sh -c "! grep -aq 'a shorter prompt' '$TMP/err'"
done
# rag prewarm --cache-dir takes its blocks from the index: the refusal says to cut another index
printf 'The Lyon warehouse ships on Mondays.\n' >"$TMP/doc.txt"
"$BIN" rag index -m "$TMP/m.gguf" --docs "$TMP/doc.txt" -o "$TMP/idx" --block-size 512 --chunk-tokens 1024 \
  >/dev/null 2>&1 || bad "rag index"
rc=0
KVT_VK_MAX_BINDING=65536 "$BIN" rag prewarm --cache-dir "$TMP/pw" -m "$TMP/m.gguf" --device vulkan "$TMP/idx" \
  --system S >/dev/null 2>"$TMP/err" || rc=$?
cat "$TMP/err" >>"$TMP/all"
check "rag prewarm: a page over one binding fails cleanly" is "$rc" 1
check "... saying the block size is the index's and how to cut another" \
  says "its blocks are the index's (512 tokens): cut the index for smaller ones with \`kvtier rag index --block-size B\`"
rc=0
KVT_VK_MAX_BINDING=65536 "${RUN[@]}" --block-size 256 >"$TMP/given" 2>"$TMP/err" || rc=$?
cat "$TMP/err" >>"$TMP/all"
check "that block size runs" is "$rc" 0
check "... giving the planned run's text" cmp -s "$TMP/planned" "$TMP/given"
# bindings of 12 KiB hold one 8 KiB page of 32 tokens each, so 128 tokens in all; pages of 24 tokens
# (6 KiB) fill them, 192 tokens: a context of 190 is refused naming both ways out, and the second runs
rc=0
KVT_VK_MAX_BINDING=12288 "${RUN[@]}" --ctx 190 >/dev/null 2>"$TMP/err" || rc=$?
cat "$TMP/err" >>"$TMP/all"
check "a context past the bindings' reach fails" is "$rc" 1
check "... naming the context and the block size that reach it" \
  says "lower --ctx-size to 128 or less, or give --block-size 24: its pages leave less of each binding unused"
rc=0
KVT_VK_MAX_BINDING=12288 "${RUN[@]}" --ctx 190 --block-size 24 >"$TMP/given" 2>"$TMP/err" || rc=$?
cat "$TMP/err" >>"$TMP/all"
check "that block size runs" is "$rc" 0
check "... giving the planned run's text" cmp -s "$TMP/planned" "$TMP/given"

# a context whose KV does not fit beside the weights: refused naming the longest that does, which runs
rc=0
KVT_VK_MEM_LIMIT=$((200 << 20)) "${RUN[@]}" --ctx 4000000 >/dev/null 2>"$TMP/err" || rc=$?
cat "$TMP/err" >>"$TMP/all"
check "a context too long for the device fails" is "$rc" 1
check "... naming its KV" says "the KV of one 4000000-token context"
ctx=$(grep -ao -- 'lower --ctx-size to [0-9]*' "$TMP/err" | tr -dc 0-9)
check "... and the longest context that fits" test -n "$ctx"
rc=0
KVT_VK_MEM_LIMIT=$((200 << 20)) "${RUN[@]}" --ctx "${ctx:-1}" >"$TMP/given" 2>"$TMP/err" || rc=$?
cat "$TMP/err" >>"$TMP/all"
check "that context runs" is "$rc" 0
check "... giving the planned run's text" cmp -s "$TMP/planned" "$TMP/given"

# a device smaller than the activations: the model does not fit at all
rc=0
KVT_VK_MEM_LIMIT=$((100 << 20)) "${RUN[@]}" >/dev/null 2>"$TMP/err" || rc=$?
cat "$TMP/err" >>"$TMP/all"
check "a model too large for the device fails" is "$rc" 1
check "... saying so" says "the model does not fit in the memory of"
check "... naming the largest -ngl" says "The largest --n-gpu-layers (-ngl) that would fit is 0 of 2"
check "... and what else to do" says "use --device cpu"

# partial offload: layer 0 on the GPU, layer 1 and the output matrix on the CPU
rc=0
"${RUN[@]}" -ngl 1 >"$TMP/ngl1" 2>"$TMP/err" || rc=$?
cat "$TMP/err" >>"$TMP/all"
check "run -ngl 1 runs" is "$rc" 0
check "... saying where the layers run" says "the first 1 of 2 layers on the GPU, the other 1 and the output matrix on the CPU"
check "... giving the all-GPU run's greedy text" cmp -s "$TMP/planned" "$TMP/ngl1"
# with -ngl 1 a page's 8 KiB are 4 on the GPU and 4 in host memory: bindings of 16 KiB reach 4 x 4
# pages, so a --kv-active of 50 pages that the memory holds is refused naming the largest that the
# bindings reach, both shares counted (16 pages of 8 KiB), and that one runs with 16 pages
rc=0
KVT_VK_MAX_BINDING=16384 "${RUN[@]}" -ngl 1 --kv-active 409600 >/dev/null 2>"$TMP/err" || rc=$?
cat "$TMP/err" >>"$TMP/all"
check "-ngl 1, a --kv-active past the bindings' reach fails" is "$rc" 1
check "... naming the largest --kv-active, both shares of a page counted" \
  says "lower --kv-active to 131072 (0.12 MiB, 16 pages) or less"
rc=0
KVT_VK_MAX_BINDING=16384 "${RUN[@]}" -ngl 1 --kv-active 131072 >"$TMP/given" 2>"$TMP/err" || rc=$?
cat "$TMP/err" >>"$TMP/all"
check "that --kv-active runs" is "$rc" 0
check "... with the 16 pages it named" says "(given): 16 pages"
check "... giving the all-GPU run's greedy text" cmp -s "$TMP/planned" "$TMP/given"
rc=0
"$BIN" eval -m "$TMP/m.gguf" -n 1 --device vulkan -ngl 1 hi >"$TMP/eval" 2>"$TMP/err" || rc=$?
cat "$TMP/err" >>"$TMP/all"
check "eval -ngl 1 runs" is "$rc" 0
check "... as eval --help says" sh -c "'$BIN' eval --help | grep -qF 'a smaller N runs the first N layers there'"
rc=0
"${RUN[@]}" -ngl 0 >"$TMP/ngl0" 2>"$TMP/err" || rc=$?
cat "$TMP/err" >>"$TMP/all"
check "run -ngl 0 runs on the CPU" is "$rc" 0
check "... saying so" says "every layer runs on the CPU"

KVT_SERVE_ARGS=(-m "$TMP/m.gguf" --host 127.0.0.1 -t 1 --device vulkan --parallel 2 --ctx 256 --gpu-memory-fraction 0.5)
kvt_start_server S
cp "${KVT_LOG[S]}" "$TMP/err"
cat "$TMP/err" >>"$TMP/all"
check "serve's start-up line plans the pool" says "serve: the engine runs on"
check "... with the share asked for" says "the engine's share 0.50 = "
check "... and sessions of the context" says " sessions of 256 tokens"
kvt_stop_server S
# JSON logs: the plan as fields, with partial offload's split
KVT_SERVE_ARGS+=(-ngl 1 --log-format json)
kvt_start_server SJ
grep -a '"gpu_layers"' "${KVT_LOG[SJ]}" | head -1 >"$TMP/err"
cat "${KVT_LOG[SJ]}" >>"$TMP/all"
check "serve -ngl 1, JSON logs: the layers on the GPU as a field" says '"gpu_layers":1'
check "... and the host's share of the pool" sh -c "grep -aq '\"host_kv_bytes\":[1-9]' '$TMP/err'"
kvt_stop_server SJ
check "no validation message" sh -c "! grep -qi 'validation' '$TMP/all'"
kvt_test_done test_gpu_plan_cli
