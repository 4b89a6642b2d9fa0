#!/usr/bin/env bash
# `kvtier serve --device vulkan` (lavapipe here): warm equals cold on the GPU
# from every tier. One chat request (greedy, with logprobs, so equal logprobs
# mean equal logits bits) is answered cold, then warm from T0 (VRAM), from T1
# (after other prompts crowd it out of a small T0), from T2 (a restarted
# server on the same cache directory) and from T3 (another server with an
# empty directory on the same Redis); every answer must be the cold one, byte
# for byte, and each must say it came from the tier it names. With q8_0 KV
# (--kv-type q8_0), a cold reply on one node and the same reply from T3 on
# another. A GPU lost while serving fails the request that meets it with a
# 500 naming the cause and turns /health into a 503. The validation layer is
# on and the server logs must not carry a validation message. With
# $KVT_TEST_NGL=N (test_gpu_serve_ngl) every server runs the first N layers on
# the GPU and the rest on the CPU (partial offload), so every tier moves pages
# with a device share and a host share.
set -u
command -v curl >/dev/null && command -v jq >/dev/null || { echo "SKIP: needs curl and jq"; exit 77; }
# the suite's ThreadSanitizer pass takes every "server" test; GPU tests stay out of it (lavapipe's
# own threads are not instrumented, and the release and ASan passes run this one)
[ -n "${TSAN_OPTIONS:-}" ] && { echo "SKIP: not under ThreadSanitizer (no GPU test is)"; exit 77; }
. "${KVT_SRC:?KVT_SRC must point to the source tree}/tests/testutil.sh"
"$BIN" info --devices >"$TMP/devices" 2>&1 || { echo "SKIP: no Vulkan device: $(head -1 "$TMP/devices")"; exit 77; }
export KVT_VK_VALIDATION=1
NGL=()
if [ -n "${KVT_TEST_NGL:-}" ]; then
  # as the C GPU variants: the sanitizer passes run the same code through the plain test
  [ -n "${KVT_SANITIZED:-}" ] && { echo "SKIP: the partial-offload variant runs in the release build only"; exit 77; }
  NGL=(-ngl "$KVT_TEST_NGL")
fi

"$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 --vocab 800 --type f16 \
  2>/dev/null || bad "mkmodel"
head -c 32 /dev/urandom >"$TMP/key" && chmod 600 "$TMP/key"
have_redis=0
if command -v redis-server >/dev/null; then kvt_start_redis && have_redis=1; fi
[ $have_redis = 1 ] || kvt_test_skip_part "redis-server is not installed: the T3 part did not run"

SYS="You are the assistant of a tiered key-value cache; you answer questions about its tiers, its disk, its remote store and its graphics memory, and you always say which tier served the prompt."
# ask URL OUT [QUESTION]: a greedy reply with logprobs
ask() {
  local q=${3:-"Which tier served this prompt?"}
  curl -s -m 120 -H 'Content-Type: application/json' \
    -d "{\"messages\":[{\"role\":\"system\",\"content\":\"$SYS\"},{\"role\":\"user\",\"content\":\"$q\"}],\"max_tokens\":12,\"temperature\":0,\"logprobs\":true,\"top_logprobs\":3}" \
    "$1/v1/chat/completions" >"$2"
}
# reply OUT: the text, then the logprobs, as exact bytes
reply() { jq -j '.choices[0].message.content' "$1"; echo; jq -c '.choices[0].logprobs' "$1"; }
tier() { jq -r ".kvtier.cached_tokens_by_tier.$2" "$1"; }
same_as_cold() { [ "$(reply "$1")" = "$(reply "$TMP/cold.json")" ] || { echo "  $1: $(reply "$1" | head -1)" >&2; return 1; }; }

REMOTE=()
[ $have_redis = 1 ] && REMOTE=(--kv-remote "redis://127.0.0.1:$RPORT" --kv-remote-key-file "$TMP/key" --kv-remote-timeout-ms 10000)
# a page of 32 tokens is 8 KiB for this model: T0 holds 12 of them, so the crowding
# prompts below push the first prompt's blocks down to T1
KVT_SERVE_ARGS=(-m "$TMP/m.gguf" --host 127.0.0.1 -t 1 --device vulkan --parallel 1 --kv-active 96K "${NGL[@]}")
mkdir -p "$TMP/d1" "$TMP/d2"
kvt_start_server A --kv-ram 64M --kv-disk "$TMP/d1" --restore always --write-through "${REMOTE[@]}"
check "the start-up log names the device" grep -q "engine runs on" "${KVT_LOG[A]}"
[ ${#NGL[@]} = 0 ] ||
  check "... and the layers on each side" grep -q "the first ${NGL[1]} of 2 layers on the GPU, the other" "${KVT_LOG[A]}"
curl -s "${KVT_URL[A]}/props" >"$TMP/props.json"
check "/props names the device" is "$(jq -r .device "$TMP/props.json")" vulkan:0
check "... and its name" is "$(jq -r .device_name "$TMP/props.json")" "$(sed -n 's/^  vulkan:0  //; s/  ([^()]*)$//p' "$TMP/devices")"
curl -s "${KVT_URL[A]}/metrics" >"$TMP/metrics.txt"
check "/metrics names the device and its numerics id" \
  grep -Eq '^kvtier_device_info\{device="vulkan:0",name="[^"]+",numerics="vk-[^"]+"\} 1$' "$TMP/metrics.txt"
check "... not lost" grep -qx 'kvtier_device_lost 0' "$TMP/metrics.txt"

ask "${KVT_URL[A]}" "$TMP/cold.json"
check "the cold reply has text and logprobs" test "$(jq -r '.choices[0].logprobs.content | length' "$TMP/cold.json")" -gt 0
check "the cold reply computed its prompt" test "$(tier "$TMP/cold.json" T0)" = 0
ask "${KVT_URL[A]}" "$TMP/t0.json"
check "warm from T0 (VRAM) came from T0" test "$(tier "$TMP/t0.json" T0)" -gt 0
check "warm from T0 equals cold" same_as_cold "$TMP/t0.json"
# other prompts (no shared prefix) take T0's pages, pushing the first one's blocks down to T1
for q in one two three four; do
  curl -s -m 120 -H 'Content-Type: application/json' -o "$TMP/other.json" \
    -d "{\"prompt\":\"$q: a different text that shares nothing with the system prompt, long enough to fill a few blocks of thirty-two tokens each, so that the engine's small pool has to reclaim the idle blocks of earlier requests and move them down to the host memory tier $q\",\"max_tokens\":4,\"temperature\":0}" \
    "${KVT_URL[A]}/v1/completions"
done
ask "${KVT_URL[A]}" "$TMP/t1.json"
check "warm from T1 came from T1 ($(tier "$TMP/t1.json" T1) tokens)" test "$(tier "$TMP/t1.json" T1)" -gt 0
check "warm from T1 equals cold" same_as_cold "$TMP/t1.json"
kvt_stop_server A
check "no validation message in A's log" sh -c "! grep -q 'validation' '${KVT_LOG[A]}'"

kvt_start_server A2 --kv-disk "$TMP/d1" --restore always
ask "${KVT_URL[A2]}" "$TMP/t2.json"
check "after a restart it came from T2 ($(tier "$TMP/t2.json" T2) tokens)" test "$(tier "$TMP/t2.json" T2)" -gt 0
check "warm from T2 equals cold" same_as_cold "$TMP/t2.json"
kvt_stop_server A2

# a GPU lost while serving (KVT_VK_LOSE_AFTER: submission N and every later one fail as
# VK_ERROR_DEVICE_LOST does): the request that meets it is a 500 naming the lost device, the server
# stays up, and /health turns from 200 to a 503 whose status is "error", so a router stops sending
KVT_VK_LOSE_AFTER=12 kvt_start_server L
code() { curl -s -o "$TMP/$2" -w '%{http_code}' "${KVT_URL[L]}$1"; }
check "/health is 200 before the device is lost" is "$(code /health health0.json)" 200
st=200
for i in $(seq 1 30); do
  st=$(curl -s -m 120 -o "$TMP/lost.json" -w '%{http_code}' -H 'Content-Type: application/json' \
    -d "{\"prompt\":\"request $i\",\"max_tokens\":2,\"temperature\":0}" "${KVT_URL[L]}/v1/completions")
  [ "$st" = 200 ] || break
done
check "a request that meets the lost device is a 500" is "$st" 500
check "... whose message names the lost device" grep -q "was lost" "$TMP/lost.json"
check "/health then answers 503" is "$(code /health health1.json)" 503
check "... with status error" is "$(jq -r .status "$TMP/health1.json")" error
check "... saying the GPU was lost" sh -c "jq -r .error '$TMP/health1.json' | grep -q 'GPU was lost'"
check "/metrics says the device was lost" sh -c "curl -s '${KVT_URL[L]}/metrics' | grep -qx 'kvtier_device_lost 1'"
check "the server logs it once" is "$(grep -ac 'was lost: every request fails' "${KVT_LOG[L]}")" 1
check "and stops cleanly" kvt_stop_server L

if [ $have_redis = 1 ]; then
  kvt_start_server B --kv-disk "$TMP/d2" --restore always "${REMOTE[@]}"
  ask "${KVT_URL[B]}" "$TMP/t3.json"
  check "another node's first request came from T3 ($(tier "$TMP/t3.json" T3) tokens)" test "$(tier "$TMP/t3.json" T3)" -gt 0
  check "warm from T3 equals cold" same_as_cold "$TMP/t3.json"
  kvt_stop_server B

  # q8_0 KV (a model with heads of 32): a reply computed cold on one node equals, byte for byte,
  # the reply of another node that restores its prompt from T3
  "$BIN" mkmodel -o "$TMP/m32.gguf" --dim 64 --layers 2 --heads 2 --kv-heads 1 --ff 128 --vocab 800 --type f16 \
    2>/dev/null || bad "mkmodel (heads of 32)"
  mkdir -p "$TMP/d3" "$TMP/d4"
  KVT_SERVE_ARGS=(-m "$TMP/m32.gguf" --host 127.0.0.1 -t 1 --device vulkan --parallel 1 --kv-active 96K --kv-type q8_0 "${NGL[@]}")
  kvt_start_server Q --kv-disk "$TMP/d3" --restore always --write-through "${REMOTE[@]}"
  ask "${KVT_URL[Q]}" "$TMP/cold.json"
  check "q8_0 KV: the cold reply computed its prompt" test "$(tier "$TMP/cold.json" T0)" = 0
  kvt_stop_server Q
  kvt_start_server Q2 --kv-disk "$TMP/d4" --restore always "${REMOTE[@]}"
  ask "${KVT_URL[Q2]}" "$TMP/q8t3.json"
  check "q8_0 KV: another node's request came from T3 ($(tier "$TMP/q8t3.json" T3) tokens)" \
    test "$(tier "$TMP/q8t3.json" T3)" -gt 0
  check "q8_0 KV: warm from T3 equals cold" same_as_cold "$TMP/q8t3.json"
  kvt_stop_server Q2
  check "no validation message in the q8_0 logs" sh -c "! grep -q 'validation' '${KVT_LOG[Q]}' '${KVT_LOG[Q2]}'"
fi
kvt_test_done "test_gpu_serve${KVT_TEST_NGL:+_ngl}"
