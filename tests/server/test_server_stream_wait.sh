#!/usr/bin/env bash
# A stream that waits on the engine longer than --timeout (here a request
# queued behind another on one slot, as a long prefill would wait) is not an
# idle connection: the whole stream arrives, [DONE] included, on the chat and
# the Responses endpoints, and the connection's idle timeout counts again
# afterwards (a keep-alive connection left idle is closed). Needs curl and jq.
set -u
command -v curl >/dev/null && command -v jq >/dev/null || { echo "SKIP: needs curl and jq"; exit 77; }
. "$(dirname "$0")/../testutil.sh"

"$BIN" mkmodel -o "$TMP/m.gguf" --dim 512 --layers 8 --heads 8 --kv-heads 2 --ff 1536 --ctx 4096 >/dev/null 2>&1 ||
  { echo "mkmodel failed"; exit 1; }
kvt_start_server main -m "$TMP/m.gguf" --host 127.0.0.1 -t 1 --parallel 1 --timeout 1 --ctx 4096
TO=1
# the busy request's length: sanitized builds (ASan: KVT_SANITIZED; TSan: TSAN_OPTIONS) decode
# 5-15x slower, so fewer tokens keep their wait past --timeout without minutes of test
BUSY_TOKENS=2000
if [ "${KVT_SANITIZED:-0}" = 1 ] || [ -n "${TSAN_OPTIONS:-}" ]; then BUSY_TOKENS=250; fi

# busy: one request that holds the only slot for a while (a whole, unstreamed answer)
busy() {
  curl -s -m 300 -o "$TMP/busy.json" "$URL/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": "busy", "max_tokens": '$BUSY_TOKENS', "ignore_eos": true, "temperature": 0}' &
  BUSY=$!
  # polled: the slot is taken once /metrics counts a sequence
  for _ in $(seq 1 200); do
    curl -s "$URL/metrics" | grep -q "^kvtier_sequences_active 1" && return 0
    sleep 0.05
  done
  return 0
}
for ep in chat responses; do
  busy
  if [ $ep = chat ]; then
    body='{"messages": [{"role": "user", "content": "hello"}], "max_tokens": 4, "stream": true}'
    path=/v1/chat/completions
  else
    body='{"input": "hello", "max_output_tokens": 4, "stream": true}'
    path=/v1/responses
  fi
  curl -sN -m 300 -o "$TMP/sse-$ep" -w '%{time_starttransfer} %{time_total}' "$URL$path" \
    -H 'Content-Type: application/json' -d "$body" >"$TMP/t-$ep"
  rc=$?
  wait "$BUSY"
  waited=$(awk '{ printf "%d", $2 * 1000 }' "$TMP/t-$ep")
  if [ "$waited" -le $((1500 * TO)) ]; then
    kvt_test_skip_part "$ep: the queued stream took only ${waited} ms, under 1.5 times --timeout; nothing to test"
    continue
  fi
  check "$ep: a stream that took ${waited} ms (--timeout $TO s) ends normally" is "$rc" 0
  if [ $ep = chat ]; then
    check "$ep: with its [DONE]" grep -q '^data: \[DONE\]' "$TMP/sse-$ep"
    check "$ep: and its finish chunk" grep -Eq '"finish_reason":"(length|stop)"' "$TMP/sse-$ep"
  else
    check "$ep: with its last event" grep -Eq '^event: response.(completed|incomplete)' "$TMP/sse-$ep"
  fi
  check "$ep: the busy request was answered too" test "$(jq -r '.choices[0].finish_reason' "$TMP/busy.json")" = length
done

# after a stream, the idle timeout counts again: a kept-alive connection left idle is closed
exec 3<>"/dev/tcp/127.0.0.1/$PORT"
printf 'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 84\r\n\r\n{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": true}  ' >&3
timeout 30 cat <&3 >"$TMP/kept"; rc=$?
exec 3>&-
check "a finished stream's idle connection is closed by --timeout (not kept for good)" is "$rc" 0
check "after the whole stream" grep -q 'data: \[DONE\]' "$TMP/kept"
kvt_test_done test_server_stream_wait
