#!/usr/bin/env bash
# kvtier serve: agent sessions and the cache admin endpoints, end to end over
# loopback with generated models.
# - /v1/cache/pin, /unpin, /prefetch, /flush, /stats: shapes, errors, the pin
#   limit, and the API key in front of them.
# - A session kept warm (kvtier.keep_warm_s) comes back entirely from T0
#   after a flood of other prompts; the same session without keep-warm does
#   not; its pin is released when its time runs out, on an idle server too.
# - Scheduling while one long request holds the only slot: a later request of
#   higher priority is admitted first; a request whose prefix was pushed down
#   to RAM is prefetched into T0 while it waits and then admitted before an
#   earlier cold one (longest resident prefix first).
# - A prompt whose cached prefix does not fit in T0 beside a running reply
#   waits in the queue for it to end, rather than computing cached blocks.
#   In these two the request that holds the slot (or the pages) is a reply the
#   server holds complete until its client leaves (its test hook
#   KVT_TEST_HOLD_SESSION), so it outlasts the checks however loaded the
#   machine, and it ends when the test's client leaves.
# - Two sessions whose replies have one text but different ids: each
#   session's next prompt splices its own reply's ids.
# Needs curl and jq.
set -u
command -v curl >/dev/null && command -v jq >/dev/null || { echo "SKIP: needs curl and jq"; exit 77; }
. "$(dirname "$0")/../testutil.sh"
KVT_SERVE_ARGS=(--host 127.0.0.1 -t 1)
# words N SEED: pseudo-random words, about N tokens of the built-in vocabulary (~6 per word), the same for the
# same seed
words() { awk -v n="$1" -v s="$2" 'BEGIN { srand(s); for (i = 0; i < n / 6; i++) printf "w%d ", int(rand() * 5000); }'; }

"$BIN" mkmodel -o "$TMP/tiny.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 --ctx 512 >/dev/null 2>&1 ||
  { echo "mkmodel failed"; exit 1; }

# ---- admin endpoints ---------------------------------------------------------------
kvt_start_server admin -m "$TMP/tiny.gguf" --parallel 1 --kv-active 160K --kv-ram 4M --kv-disk "$TMP/kv" --kv-disk-size 64M \
  --api-key sekrit
AUTH=(-H 'Authorization: Bearer sekrit')
P1="$(words 100 1)"
post /v1/cache/stats '' -X GET
check "stats needs the API key" is "$CODE" 401
post /v1/cache/pin "{\"prompt\": \"$P1\"}"
check "pin needs the API key" is "$CODE" 401
post /v1/completions "{\"prompt\": \"$P1\", \"max_tokens\": 4, \"temperature\": 0}" "${AUTH[@]}"
check "completion" is "$CODE" 200
post /v1/cache/pin "{\"prompt\": \"$P1\"}" "${AUTH[@]}"
check "pin 200" is "$CODE" 200
PIN=$(jb .pin_id)
check "pin returns an id" is "${PIN:0:4}" "pin-"
check "pin holds the cached prefix" gt "$(jb .pinned_tokens)" 63
curl -s "${AUTH[@]}" "$URL/v1/cache/stats" >"$TMP/body"
check "stats lists the pin" is "$(jb '.pins[0].pin_id')" "$PIN"
check "stats counts pinned pages" gt "$(jb .T0.pages_pinned)" 0
check "stats has the tiers" is "$(jb '.T1.budget_bytes > 0 and .T2.budget_bytes > 0')" true
# flood: the pinned prefix stays in T0
for k in 2 3 4 5 6; do post /v1/completions "{\"prompt\": \"$(words 100 $k)\", \"max_tokens\": 4}" "${AUTH[@]}"; done
post /v1/completions "{\"prompt\": \"$P1\", \"max_tokens\": 4, \"temperature\": 0}" "${AUTH[@]}"
check "a pinned prefix survives a flood in T0" is "$(jb '.kvtier.cached_tokens_by_tier.T0 == .kvtier.cached_tokens and .kvtier.cached_tokens > 63')" true
post /v1/cache/unpin "{\"pin_id\": \"$PIN\"}" "${AUTH[@]}"
check "unpin 200" is "$CODE" 200
post /v1/cache/unpin "{\"pin_id\": \"$PIN\"}" "${AUTH[@]}"
check "unpin twice is 404" is "$CODE" 404
post /v1/cache/unpin '{}' "${AUTH[@]}"
check "unpin without an id is 400 naming pin_id" is "$CODE/$(jb .error.param)" 400/pin_id
# an id of another type is not taken for no id (beside a session_id it would release only that)
for f in '"pin_id": 7' '"session_id": ["a"]' '"cache_salt": 1'; do
  post /v1/cache/unpin "{$f}" "${AUTH[@]}"
  check "unpin with $f is a 400 naming it" is "$CODE/$(jb .error.param)" "400/$(sed 's/^"\([a-z_]*\)".*/\1/' <<<"$f")"
done
post /v1/cache/unpin '{"pin_id": null, "cache_salt": null}' "${AUTH[@]}"
check "... null is absent" is "$CODE/$(jb .error.param)" 400/pin_id
# the pin limit: pins hold at most half of the pool
for k in 7 8 9 10; do
  post /v1/completions "{\"prompt\": \"$(words 100 $k)\", \"max_tokens\": 1}" "${AUTH[@]}"
  post /v1/cache/pin "{\"prompt\": \"$(words 100 $k)\"}" "${AUTH[@]}"
  last=$CODE
done
check "pins beyond half the pool are refused with 409" is "$last" 409
check "the refusal says why" grep -q "active pages in pins" "$TMP/body"
# prefetch brings a prefix pushed down to RAM back into T0
for k in 11 12 13 14 15; do post /v1/completions "{\"prompt\": \"$(words 100 $k)\", \"max_tokens\": 4}" "${AUTH[@]}"; done
post /v1/cache/prefetch "{\"prompt\": \"$P1\"}" "${AUTH[@]}"
check "prefetch 200" is "$CODE" 200
check "prefetch makes the prefix resident" gt "$(jb .resident_tokens)" 63
post /v1/cache/flush '' "${AUTH[@]}"
check "flush 200" is "$CODE" 200
curl -s "${AUTH[@]}" "$URL/v1/cache/stats" >"$TMP/body"
check "flush wrote the cache to disk" gt "$(jb .T2.records)" 0
check "nothing was discarded" is "$(jb .discarded_blocks)" 0
post /v1/completions "{\"prompt\": \"x\", \"kvtier\": {\"session\": \"a\"}}" "${AUTH[@]}"
check "an unknown kvtier field is a 400" is "$CODE" 400
check "the 400 names the field" grep -q "kvtier.session" "$TMP/body"
post /v1/completions "{\"prompt\": \"x\", \"kvtier\": {\"keep_warm_s\": 5}}" "${AUTH[@]}"
check "keep_warm_s without a session is a 400" is "$CODE" 400
curl -s "${AUTH[@]}" "$URL/metrics" >"$TMP/metrics"
for m in kvtier_cache_shortfalls_total kvtier_cache_discarded_blocks_total kvtier_sessions_warm kvtier_pinned_pages \
  kvtier_disk_write_waits_total kvtier_prefetched_blocks_total; do
  check "/metrics has $m" grep -q "^$m" "$TMP/metrics"
done

# ---- sessions kept warm ---------------------------------------------------------------
kvt_start_server warm -m "$TMP/tiny.gguf" --parallel 1 --kv-active 160K --kv-ram 4M --session-keep-warm 0
S1="$(words 180 21)" S2="$(words 180 22)"
post /v1/completions "{\"prompt\": \"$S1\", \"max_tokens\": 4, \"kvtier\": {\"session_id\": \"s1\", \"keep_warm_s\": 600}}"
check "warm session request" is "$CODE" 200
post /v1/completions "{\"prompt\": \"$S2\", \"max_tokens\": 4}" -H 'X-Session-Id: s2'
check "session by header" is "$CODE" 200
curl -s "$URL/v1/cache/stats" >"$TMP/body"
check "one session is warm (s2 has no keep-warm time: --session-keep-warm 0)" is "$(jb .warm_sessions)" 1
for k in 31 32 33 34; do post /v1/completions "{\"prompt\": \"$(words 180 $k)\", \"max_tokens\": 4}"; done
post /v1/completions "{\"prompt\": \"$S1\", \"max_tokens\": 4, \"kvtier\": {\"session_id\": \"s1\"}}"
check "the warm session resumes entirely from T0" \
  is "$(jb '.kvtier.cached_tokens > 127 and .kvtier.cached_tokens_by_tier.T0 == .kvtier.cached_tokens')" true
post /v1/completions "{\"prompt\": \"$S2\", \"max_tokens\": 4}" -H 'X-Session-Id: s2'
check "the session without keep-warm was moved out of T0 by the flood" \
  is "$(jb '.kvtier.cached_tokens_by_tier.T0 < .kvtier.cached_tokens')" true
check "... and still comes back whole from RAM" is "$(jb '.kvtier.cached_tokens == .kvtier.planned_cached_tokens and .kvtier.cached_tokens > 127')" true
# a session's keep-warm time runs out on an idle server too: its pin goes, and no page stays pinned
post /v1/cache/unpin '{"session_id": "s1"}'
check "unpin by session_id" is "$CODE" 200
post /v1/completions "{\"prompt\": \"$S2\", \"max_tokens\": 4, \"kvtier\": {\"session_id\": \"s3\", \"keep_warm_s\": 1}}"
check "a session kept warm for 1 s" is "$(jb '.kvtier.cached_tokens > 127')" true
idle_unpinned() {
  curl -s "$URL/v1/cache/stats" >"$TMP/stats" &&
    jq -e '.warm_sessions == 0 and .T0.pages_pinned == 0 and .T0.pages_free + .T0.pages_idle == .T0.pages_total' \
      "$TMP/stats"
}
check "its pin is released when it expires, with no request coming" wait_for idle_unpinned
check "... counted as expired" is "$(jq .sessions_expired "$TMP/stats")" 1
check "/metrics shows no session warm" grep -q '^kvtier_sessions_warm 0$' <(curl -s "$URL/metrics")

# ---- scheduling and prefetch behind a long request ---------------------------------------
"$BIN" mkmodel -o "$TMP/med.gguf" --dim 384 --layers 6 --heads 6 --kv-heads 2 --ff 1024 --ctx 2048 >/dev/null 2>&1
# held N: the log of the server started last says N replies are held in their slots (KVT_TEST_HOLD_SESSION)
held() { [ "$(grep -c 'held in its slot' "${KVT_LOG[$SRV_NAME]}")" -ge "$1" ]; }
HOLD='"kvtier": {"session_id": "hold"}'
KVT_TEST_HOLD_SESSION=hold kvt_start_server sched -m "$TMP/med.gguf" --parallel 1 --ctx 2048 --kv-active 6M --kv-ram 32M \
  --session-keep-warm 0
X="$(words 250 41)"
post /v1/completions "{\"prompt\": \"$X\", \"max_tokens\": 4, \"temperature\": 0}"
check "X computed" is "$CODE" 200
for k in 42 43 44 45 46; do post /v1/completions "{\"prompt\": \"$(words 420 $k)\", \"max_tokens\": 2}"; done
# A's reply is held in the only slot until its client leaves, once the checks below have seen it
# hold the slot with three waiting behind it
curl -s -m 300 -H 'Content-Type: application/json' -o "$TMP/a.json" \
  -d '{"prompt": "a long task", "max_tokens": 4, '"$HOLD"'}' "$URL/v1/completions" &
A=$!
check "the long request holds the slot" wait_for held 1
check "... busy in /health" is "$(health .slots_busy)" 1
curl -s -m 300 -H 'Content-Type: application/json' -o "$TMP/b.json" \
  -d "{\"prompt\": \"$(words 60 47)\", \"max_tokens\": 4}" "$URL/v1/completions" &
B=$!
check "B waits" wait_health .queued 1
curl -s -m 300 -H 'Content-Type: application/json' -o "$TMP/x.json" \
  -d "{\"prompt\": \"$X\", \"max_tokens\": 4, \"temperature\": 0}" "$URL/v1/completions" &
XP=$!
check "X waits" wait_health .queued 2
curl -s -m 300 -H 'Content-Type: application/json' -o "$TMP/d.json" \
  -d "{\"prompt\": \"$(words 60 48)\", \"max_tokens\": 4, \"kvtier\": {\"session_id\": \"vip\", \"priority\": 5}}" \
  "$URL/v1/completions" &
D=$!
check "D waits" wait_health .queued 3
check "A was still running when all three were queued" is "$(health .slots_busy)" 1
# the engine prefetches one waiting request per step, X's all at once: then A's client leaves
prefetched() { [ "$(curl -s -m 10 "$URL/v1/cache/stats" | jq -r '.prefetched_blocks')" -gt 0 ]; }
check "X's prefetch while A runs" wait_for prefetched
check "... with A still running" is "$(health .slots_busy)/$(health .queued)" 1/3
kill $A
wait $A $B $XP $D
b=$(jq .kvtier.admission_seq "$TMP/b.json")
x=$(jq .kvtier.admission_seq "$TMP/x.json") d=$(jq .kvtier.admission_seq "$TMP/d.json")
check "the higher priority (D) goes first (admitted $b: B, $x: X, $d: D)" lt "$d" "$x"
check "X, prefetched while waiting, goes before the earlier cold B" lt "$x" "$b"
check "X's prefix was prefetched into T0 while it waited" gt "$(jq '.kvtier.prefetched_tokens // 0' "$TMP/x.json")" 0
check "X came entirely from T0" \
  is "$(jq '.kvtier.cached_tokens > 200 and .kvtier.cached_tokens_by_tier.T0 == .kvtier.cached_tokens' "$TMP/x.json")" true

# ---- a cached prefix that does not fit in T0 beside a running reply waits, not recomputed ----------------
# T0 holds 64 pages of 32 tokens: a reply of ~1,300 prompt tokens, held complete, holds 41 of them, so
# Y's ~950 cached tokens (29 pages, in RAM) cannot all come back while it holds them
KVT_TEST_HOLD_SESSION=hold kvt_start_server room -m "$TMP/med.gguf" --parallel 2 --ctx 2048 --kv-active 6M --kv-ram 32M \
  --session-keep-warm 0
Y="$(words 1000 51)"
post /v1/completions "{\"prompt\": \"$Y\", \"max_tokens\": 2, \"temperature\": 0}"
check "Y computed" is "$CODE" 200
for k in 52 53 54; do post /v1/completions "{\"prompt\": \"$(words 1000 $k)\", \"max_tokens\": 2}"; done
curl -s -m 300 -H 'Content-Type: application/json' -o "$TMP/long.json" \
  -d "{\"prompt\": \"$(words 1300 55)\", \"max_tokens\": 4, $HOLD}" "$URL/v1/completions" &
L=$!
check "the long reply holds its pages" wait_for held 1
curl -s -m 300 -H 'Content-Type: application/json' -o "$TMP/y.json" \
  -d "{\"prompt\": \"$Y\", \"max_tokens\": 2, \"temperature\": 0}" "$URL/v1/completions" &
YP=$!
check "Y waits in the queue" wait_health .queued 1
kill $L
wait $L $YP
check "Y then comes back whole from the cache" \
  is "$(jq '.kvtier.cached_tokens > 895 and .kvtier.cached_tokens == .kvtier.planned_cached_tokens' "$TMP/y.json")" true
curl -s "$URL/v1/cache/stats" >"$TMP/body"
check "no cached token was computed again for want of room" is "$(jb .shortfalls.no_room)" 0
check "the log says why Y waited" grep -q "waits for a running request to end" "${KVT_LOG[room]}"

# ---- two sessions, one reply text, different ids: each history splices its own ----------------------------
# bytes 0xA2 and 0x8E (ids 162 and 142 of the built-in vocabulary) are each invalid alone and print as U+FFFD
kvt_start_server twins -m "$TMP/tiny.gguf" --parallel 1
for pair in "one 162" "two 142"; do
  set -- $pair
  post /v1/chat/completions "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}], \"max_tokens\": 1,
    \"temperature\": 0, \"logit_bias\": {\"$2\": 100}, \"kvtier\": {\"session_id\": \"$1\"}}"
  check "session $1 replies U+FFFD" is "$CODE/$(jb '.choices[0].message.content')" "200/$(printf '\xef\xbf\xbd')"
done
HIST='"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "\ufffd"},
  {"role": "user", "content": "next"}]'
reply_id() { jb '.tokens | . as $t | [range(length) | select($t[.] == 162 or $t[.] == 142) | $t[.]] | join(",")'; }
post /apply-template "{$HIST, \"kvtier\": {\"session_id\": \"one\"}}"
check "session one's history splices its own id (162) though two's came later" is "$(reply_id)" 162
post /apply-template "{$HIST, \"kvtier\": {\"session_id\": \"two\"}}"
check "session two's splices 142" is "$(reply_id)" 142
post /apply-template "{$HIST}" -H 'X-Session-Id: one'
check "X-Session-Id names the session too" is "$(reply_id)" 162
post /apply-template "{$HIST}"
check "without a session: the newest reply of that text" is "$(reply_id)" 142
post /apply-template "{$HIST, \"kvtier\": {\"session_id\": \"three\"}}"
check "a session without such a reply: the newest too" is "$(reply_id)" 142

kvt_test_done test_server_sessions
