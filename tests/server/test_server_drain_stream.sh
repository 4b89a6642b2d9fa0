#!/usr/bin/env bash
# A stream cut by the end of a drain (SIGTERM, --drain-timeout passed) ends
# as a reply cut short, not as a dropped connection: its last text, a final
# chunk with finish_reason "length", then [DONE] (on /completion, the event
# with stop: true); the server still exits 0. Needs curl and jq.
set -u
command -v curl >/dev/null && command -v jq >/dev/null || { echo "SKIP: needs curl and jq"; exit 77; }
. "$(dirname "$0")/../testutil.sh"

# the default-size model decodes slowly enough for the drain to end mid-reply
"$BIN" mkmodel -o "$TMP/slow.gguf" >/dev/null 2>&1 || { echo "mkmodel failed"; exit 1; }
KVT_SERVE_ARGS=(-m "$TMP/slow.gguf" --host 127.0.0.1 -t 1 --parallel 1 --drain-timeout 1)
events() { grep -c '^data: {' "$1"; }

# cut PATH BODY OUT: streams BODY to PATH on a new server, which is sent SIGTERM once a few events
# are in; the stream in OUT, curl's exit status in OUT.rc, the server's in OUT.srv
cut() {
  kvt_start_server "$3"
  curl -s -N -m 120 -H 'Content-Type: application/json' -d "$2" "$URL$1" >"$TMP/$3" &
  local cpid=$! rc=0
  wait_for bash -c "[ \$(grep -c '^data: {' '$TMP/$3') -gt 3 ]" || bad "the stream of $1 never began"
  kvt_stop_server "$3" || rc=$?
  echo "$rc" >"$TMP/$3.srv"
  rc=0
  wait "$cpid" || rc=$?
  echo "$rc" >"$TMP/$3.rc"
}

cut /v1/completions '{"prompt": "drain", "max_tokens": 4000, "ignore_eos": true, "stream": true}' oai
check "the server exits 0" is "$(cat "$TMP/oai.srv")" 0
check "the cut stream ends cleanly (curl exit 0)" is "$(cat "$TMP/oai.rc")" 0
check "... with [DONE] last" is "$(grep '^data: ' "$TMP/oai" | tail -n 1)" 'data: [DONE]'
grep '^data: {' "$TMP/oai" | sed 's/^data: //' >"$TMP/oai.json"
check "... after a final chunk with finish_reason length" \
  is "$(jq -s -r '.[-1].choices[0].finish_reason' "$TMP/oai.json")" length
check "... the only one with a reason" is "$(jq -s '[.[] | select(.choices[0].finish_reason != null)] | length' "$TMP/oai.json")" 1
check "... and no error event" bash -c "! grep -q '\"error\"' '$TMP/oai'"
check "... cut short of its 4000 tokens" lt "$(jq -s '[.[] | .choices[0].text] | length' "$TMP/oai.json")" 4000

cut /completion '{"prompt": "drain", "n_predict": 4000, "ignore_eos": true, "stream": true}' native
check "a cut /completion stream ends cleanly too" is "$(cat "$TMP/native.rc")/$(cat "$TMP/native.srv")" 0/0
grep '^data: {' "$TMP/native" | sed 's/^data: //' >"$TMP/native.json"
check "... with its stop event last" is "$(jq -s -c '.[-1] | [.stop, .stop_type]' "$TMP/native.json")" '[true,"limit"]'
check "... whose tokens_predicted counts what was sent" \
  gt "$(jq -s '.[-1].tokens_predicted' "$TMP/native.json")" 0

kvt_test_done test_server_drain_stream
