#!/usr/bin/env bash
# A stream cut by the end of a drain (SIGTERM, --drain-timeout passed) ends
# as a reply cut short, not as a dropped connection: its last text, a final
# chunk with finish_reason "length", then [DONE] (on /completion, the event
# with stop: true); the server still exits 0. A Responses stream cut while
# generating ends with response.incomplete, reason "server_shutting_down"
# (not max_output_tokens: the client's budget was not reached), its text so
# far kept; one that never got its turn ends with response.failed. Needs curl
# and jq.
set -u
command -v curl >/dev/null && command -v jq >/dev/null || { echo "SKIP: needs curl and jq"; exit 77; }
. "$(dirname "$0")/../testutil.sh"

# the default-size model decodes slowly enough for the drain to end mid-reply
"$BIN" mkmodel -o "$TMP/slow.gguf" >/dev/null 2>&1 || { echo "mkmodel failed"; exit 1; }
KVT_SERVE_ARGS=(-m "$TMP/slow.gguf" --host 127.0.0.1 -t 1 --parallel 1 --drain-timeout 1)
events() { grep -c '^data: {' "$1"; }

# cut PATH BODY OUT [MIN]: streams BODY to PATH on a new server, which is sent SIGTERM once more than
# MIN (3) events are in; the stream in OUT, curl's exit status in OUT.rc, the server's in OUT.srv
cut() {
  kvt_start_server "$3"
  curl -s -N -m 120 -H 'Content-Type: application/json' -d "$2" "$URL$1" >"$TMP/$3" &
  local cpid=$! rc=0
  wait_for bash -c "[ \$(grep -c '^data: {' '$TMP/$3') -gt ${4:-3} ]" || bad "the stream of $1 never began"
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

# a Responses stream cut while generating (a few text deltas out) ends as a response cut short (this
# greedy reply runs past 2000 tokens: no end-of-text before the drain ends)
cut /v1/responses '{"input": "drain drain drain", "max_output_tokens": 4000, "temperature": 0, "stream": true}' rcut 6
check "a cut Responses stream ends cleanly too" is "$(cat "$TMP/rcut.rc")/$(cat "$TMP/rcut.srv")" 0/0
grep '^data: {' "$TMP/rcut" | sed 's/^data: //' >"$TMP/rcut.json"
check "... with response.incomplete last, its event line naming it" \
  is "$(jq -s -r '.[-1].type' "$TMP/rcut.json") $(grep '^event: ' "$TMP/rcut" | tail -n 1)" \
  'response.incomplete event: response.incomplete'
check "... whose reason says the server stopped, not the client's budget" \
  is "$(jq -s -c '.[-1].response | [.status, .incomplete_details.reason, .output[0].status, .error]' "$TMP/rcut.json")" \
  '["incomplete","server_shutting_down","incomplete",null]'
check "... keeping the text streamed so far" \
  is "$(jq -s -r '.[-1].response.output[0].content[0].text' "$TMP/rcut.json")" \
  "$(jq -s -j '.[] | select(.type == "response.output_text.delta") | .delta' "$TMP/rcut.json")"
check "... and no error or failed event" \
  is "$(jq -s '[.[] | select(.type == "error" or .type == "response.failed")] | length' "$TMP/rcut.json")" 0

# a Responses stream still queued (its 200 and response.created sent) when the drain ends fails:
# an error event, then response.failed with the response as failed and its error, as its last event
kvt_start_server resp
curl -s -N -m 120 -H 'Content-Type: application/json' -d '{"prompt": "drain", "max_tokens": 4000, "ignore_eos": true, "stream": true}' \
  "$URL/v1/completions" >"$TMP/resp.a" &
apid=$!
wait_for bash -c "[ \$(grep -c '^data: {' '$TMP/resp.a') -gt 3 ]" || bad "the stream before it never began"
curl -s -N -m 120 -H 'Content-Type: application/json' -d '{"input": "drain", "max_output_tokens": 4000, "stream": true}' \
  "$URL/v1/responses" >"$TMP/resp.b" &
bpid=$!
wait_for grep -q '^event: response.in_progress' "$TMP/resp.b" || bad "the Responses stream never began"
rc=0
kvt_stop_server resp || rc=$?
check "with a Responses stream queued, the server exits 0" is "$rc" 0
rc=0
wait "$bpid" || rc=$?
wait "$apid" || true
check "... the failed stream ends cleanly (curl exit 0)" is "$rc" 0
grep '^data: {' "$TMP/resp.b" | sed 's/^data: //' >"$TMP/resp.json"
check "... its events: created, in_progress, error, response.failed" \
  is "$(jq -s -c '[.[].type]' "$TMP/resp.json")" '["response.created","response.in_progress","error","response.failed"]'
check "... the last one the response as failed, with its error" \
  is "$(jq -s -c '.[-1].response | [.status, .error.code, (.error.message | test("shutting down")), .output]' "$TMP/resp.json")" \
  '["failed","server_error",true,[]]'
check "... its event lines name the same types" \
  is "$(grep '^event: ' "$TMP/resp.b" | tail -n 2 | tr '\n' ' ')" 'event: error event: response.failed '

kvt_test_done test_server_drain_stream
