#!/usr/bin/env bash
# A prompt queued before SIGTERM starts a drain is admitted during the drain;
# when the pages run out under it (another request holds the rest), it goes
# back to the queue and runs once that request ends, as it would without the
# drain: the drain lets every request in flight finish, so it gets its answer,
# not a 503. New connections are refused meanwhile. The two requests that hold
# the slots are replies the server holds complete in their slots, with their
# pages, until their clients leave (its test hook KVT_TEST_HOLD_SESSION), so
# the test, not the length of a reply, decides when each slot frees: the
# prompt starts after the SIGTERM whatever the load. Needs curl.
set -u
command -v curl >/dev/null || { echo "SKIP: needs curl"; exit 77; }
. "$(dirname "$0")/../testutil.sh"

"$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 --ctx 1024 >/dev/null 2>&1 ||
  { echo "mkmodel failed"; exit 1; }
# a pool of 40 pages of 32 tokens (256 bytes a token): the held long reply (782 prompt tokens, 25 pages)
# and the queued prompt (782) do not fit together
KVT_SERVE_ARGS=(-m "$TMP/m.gguf" --host 127.0.0.1 -t 1 --parallel 2 --ctx 1024 --kv-active 320K --drain-timeout 300)
prompt() { seq -s ' ' "$1" 5 "$(($1 + 1000))"; } # 201 numbers: 782 tokens, no two prompts alike
# gen OUT JSON: posts JSON to /v1/completions (answered whole), the body in $TMP/OUT and the status in
# $TMP/OUT.code; run in the background, $! is curl's pid, so killing it is the client leaving
gen() {
  exec curl -s -m 300 -o "$TMP/$1" -w '%{http_code}' -H 'Content-Type: application/json' -d "$2" \
    "$URL/v1/completions" >"$TMP/$1.code"
}
HOLD='"kvtier": {"session_id": "hold"}'
held() { [ "$(grep -c 'held in its slot' "$LOG")" -ge "$1" ]; }
queued() { curl -s -m 10 "$URL/metrics" | grep -q '^kvtier_queue_depth 1$'; }
# refused: a new request cannot connect (curl's exit 7): the drain closed the listening socket, which
# it does after it set the server draining
refused() {
  local rc=0
  curl -s -m 10 -o /dev/null -H 'Content-Type: application/json' -d '{"prompt": "late"}' "$URL/v1/completions" || rc=$?
  [ "$rc" = 7 ]
}
gave_way() { grep -qE 'goes back to the queue|KV memory exhausted' "$LOG"; }

KVT_TEST_HOLD_SESSION=hold kvt_start_server s
LOG=${KVT_LOG[s]}
gen long "{\"prompt\": \"$(prompt 1)\", \"max_tokens\": 2, \"temperature\": 0, $HOLD}" &
L=$!
check "the long reply holds a slot and its pages" wait_for held 1
gen short '{"prompt": "short", "max_tokens": 2, "temperature": 0, '"$HOLD"'}' &
S=$!
check "the short reply holds the other slot" wait_for held 2
gen queued "{\"prompt\": \"$(prompt 2)\", \"max_tokens\": 2, \"temperature\": 0}" &
Q=$!
check "the third prompt queues" wait_for queued
kill -TERM "$SRV_PID"
check "the drain refuses new connections" wait_for refused
kill "$S" # the short reply's client leaves: its slot frees during the drain, and the queued prompt starts
check "the queued prompt runs out of pages beside the long reply" wait_for gave_way
check "... and goes back to the queue, after the SIGTERM" \
  bash -c "sed -n '/SIGTERM received/,\$p' '$LOG' | grep -q 'goes back to the queue'"
check "no request is ended for want of pages" bash -c "! grep -q 'KV memory exhausted' '$LOG'"
kill "$L" # the long reply's client leaves: its pages free, and the prompt runs again
wait "$Q"
rc=0
kvt_wait_server s || rc=$?
wait "$S" "$L" 2>/dev/null
check "the queued prompt is answered" is "$(cat "$TMP/queued.code")" 200
check "... with its two tokens" grep -q '"completion_tokens": *2[,}]' "$TMP/queued"
check "the server exits 0 once it is done" is "$rc" 0
kvt_test_done test_server_drain_requeue
