#!/usr/bin/env bash
# kvtier serve: what one client can learn of another's prompt, tried as an
# attacker would, over loopback with a generated model.
# - Text: by default no answer quotes a cached block another client sent (no
#   reuse_stop.cached_text or cached_tokens ids); the lint, which quotes prompt
#   text, is the admin key's alone; --explain-text shows the cached side, and
#   never across API keys.
# - The guessed-block oracle: in one namespace, cached_tokens tells which guess
#   of a templated secret is cached. Each remedy closes it: API keys (a
#   namespace per key), a per-user cache_salt, --hide-cached-tokens.
# - Admin scope: pin ids are random; a key sees and releases only its own pins
#   and warm sessions (another's are 404); the admin key sees and releases all.
# Needs curl and jq.
set -u
command -v curl >/dev/null && command -v jq >/dev/null || { echo "SKIP: needs curl and jq"; exit 77; }
. "$(dirname "$0")/../testutil.sh"
KVT_SERVE_ARGS=(--host 127.0.0.1 -t 1 --parallel 2 --ctx 1024)
# words N SEED: pseudo-random words, about N tokens of the built-in vocabulary, the same for the same seed
words() { awk -v n="$1" -v s="$2" 'BEGIN { srand(s); for (i = 0; i < n / 6; i++) printf "w%d ", int(rand() * 5000); }'; }
# secret PIN: a templated prompt with a low-entropy secret in its second block, many blocks after it
secret() { echo "$(words 40 7) the admin password is hunter2-ZEBRA-$1 and the pin is $1. $(words 160 8)"; }
complete() { # complete PROMPT [EXTRA_JSON_FIELDS] [CURL_ARGS...]: a greedy completion of 2 tokens
  local p=$1 extra=${2:-}; shift 2 2>/dev/null || shift $#
  post /v1/completions "{\"prompt\":\"$p\",\"max_tokens\":2,\"temperature\":0${extra:+,$extra}}" "$@"
}
# guess: client B's probe, the secret's start with a wrong continuation (a whole differing block)
guess() { echo "$(words 40 7) the admin password is guessed wrong $(words 60 9)"; }
# oracle EXTRA CURL_ARGS...: how many more cached tokens the right guess (42) gets than a wrong one (17),
# after a warm-up guess (99) has cached the template's shared start in the prober's own namespace
oracle() {
  local extra=$1 wrong right; shift
  complete "$(secret 99)" "$extra" "$@"
  complete "$(secret 17)" "$extra" "$@"
  wrong=$(jb .usage.prompt_tokens_details.cached_tokens)
  complete "$(secret 42)" "$extra" "$@"
  right=$(jb .usage.prompt_tokens_details.cached_tokens)
  echo $((right - wrong))
}
no_secret() { ! grep -q -e hunter2 -e ZEBRA "$TMP/body"; } # the body holds no part of the secret

"$BIN" mkmodel -o "$TMP/tiny.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 --ctx 1024 >/dev/null 2>&1 ||
  { echo "mkmodel failed"; exit 1; }
KVT_SERVE_ARGS+=(-m "$TMP/tiny.gguf")

# ---- an open server with the defaults: one namespace, no text crosses ------------------------
kvt_start_server open
complete "$(secret 42)"
check "client A's request" is "$CODE" 200
# client B guesses the start and reads what the report says of the rest
complete "$(guess)"
check "client B's guess: reuse stops where it differs" is "$(jb .kvtier.reuse_stop.reason)" diverged
check "... B sees its own side of the difference" is "$(jb '.kvtier.reuse_stop | has("prompt_text")')" true
check "... but no cached text and no cached token ids" is "$(jb '.kvtier.reuse_stop | has("cached_text") or has("cached_tokens")')" false
check "... and no part of A's secret anywhere" no_secret
CODE=$(curl -s -m 10 -o "$TMP/body" -w '%{http_code}' "$URL/v1/cache/lint")
check "the lint without an admin key configured is 403" is "$CODE" 403
check "... naming --admin-key" is "$(jb '.error.message | test("--admin-key")')" true
check "... and no secret in it" no_secret
CODE=$(curl -s -m 10 -o "$TMP/body" -w '%{http_code}' "$URL/dashboard/requests")
check "the dashboard's requests hold no prompt text" no_secret
# the oracle this namespace keeps: the right guess of the secret has more cached tokens than a wrong one
check "one namespace is one trust domain: cached_tokens confirms the right guess" gt "$(oracle '')" 0
# remedy: a gateway's per-user cache_salt
complete "$(secret 42)" '"cache_salt":"user-a"'
check "per-user cache_salt: the right guess is not told apart" is "$(oracle '"cache_salt":"user-b"')" 0
kvt_stop_server open

# ---- --explain-text, --admin-key and API keys ------------------------------------------------
kvt_start_server keyed --api-key key-a --api-key key-b --admin-key adm-key --explain-text
A=(-H 'Authorization: Bearer key-a') B=(-H 'Authorization: Bearer key-b') ADM=(-H 'Authorization: Bearer adm-key')
complete "$(secret 42)" '' "${A[@]}"
complete "$(secret 42)" '' "${A[@]}"
complete "$(guess)" '' "${A[@]}"
check "--explain-text: the same key sees the cached side" is "$(jb '.kvtier.reuse_stop.cached_text | test("hunter|ZEBRA|pin")')" true
complete "$(guess)" '' "${B[@]}"
check "another key's guess finds nothing of A's" is "$(jb .usage.prompt_tokens_details.cached_tokens)" 0
check "... and no text of A's" no_secret
check "API keys: another key's right guess is not told apart" is "$(oracle '' "${B[@]}")" 0
CODE=$(curl -s -m 10 -o "$TMP/body" -w '%{http_code}' "${A[@]}" "$URL/v1/cache/lint")
check "an API key does not open the lint" is "$CODE" 401
CODE=$(curl -s -m 10 -o "$TMP/body" -w '%{http_code}' "${ADM[@]}" "$URL/v1/cache/lint")
check "the admin key opens the lint" is "$CODE" 200
check "... over every tenant's prompts" ge "$(jb .prompts)" 4
complete "x" '' "${ADM[@]}"
check "the admin key is not a tenant: a completion with it is 401" is "$CODE" 401
CODE=$(curl -s -m 10 -o /dev/null -w '%{http_code}' "${ADM[@]}" "$URL/metrics")
check "the admin key opens /metrics" is "$CODE" 200

# admin scope: pins
post /v1/cache/pin "{\"prompt\":\"$(secret 42)\"}" "${A[@]}"
check "A pins its prompt" is "$CODE" 200
PIN=$(jb .pin_id)
check "a pin id is 128 random bits" is "$(echo "$PIN" | grep -cE '^pin-[0-9a-f]{32}$')" 1
post /v1/cache/pin "{\"prompt\":\"$(secret 42)\"}" "${A[@]}"
PIN2=$(jb .pin_id)
check "two pins get unrelated ids" is "$([ "$PIN" != "$PIN2" ] && echo differ)" differ
curl -s -m 10 "${B[@]}" "$URL/v1/cache/stats" >"$TMP/body"
check "B's stats list none of A's pins" is "$(jb '.pins | length')" 0
curl -s -m 10 "${A[@]}" "$URL/v1/cache/stats" >"$TMP/body"
check "A's stats list A's pins" is "$(jb '[.pins[].pin_id] | sort | join(",")')" "$(printf '%s\n' "$PIN" "$PIN2" | sort | paste -sd,)"
post /v1/cache/unpin "{\"pin_id\":\"$PIN\"}" "${B[@]}"
check "B cannot release A's pin (404, as for none)" is "$CODE" 404
curl -s -m 10 "${A[@]}" "$URL/v1/cache/stats" >"$TMP/body"
check "... and A's pin is still there" is "$(jb "[.pins[].pin_id] | index(\"$PIN\") != null")" true
post /v1/cache/unpin "{\"pin_id\":\"$PIN\",\"cache_salt\":\"other\"}" "${A[@]}"
check "A under another cache_salt cannot release it either" is "$CODE" 404
post /v1/cache/unpin "{\"pin_id\":\"$PIN\"}" "${A[@]}"
check "A releases its pin" is "$CODE" 200
curl -s -m 10 "${ADM[@]}" "$URL/v1/cache/stats" >"$TMP/body"
check "the admin key sees every pin, with its namespace" is "$(jb "[.pins[] | select(.pin_id == \"$PIN2\") | .namespace | length] | .[0]")" 16
post /v1/cache/unpin "{\"pin_id\":\"$PIN2\"}" "${ADM[@]}"
check "the admin key releases any pin" is "$CODE" 200
post /v1/cache/unpin "{\"pin_id\":\"$PIN2\"}" "${A[@]}"
check "... which is then gone" is "$CODE" 404
# admin scope: warm sessions, named alike by two keys
complete "$(secret 42)" '"kvtier":{"session_id":"sess-A","keep_warm_s":60}' "${A[@]}"
check "A keeps session sess-A warm" is "$CODE" 200
post /v1/cache/unpin '{"session_id":"sess-A"}' "${B[@]}"
check "B cannot end A's session sess-A" is "$CODE" 404
curl -s -m 10 "${ADM[@]}" "$URL/v1/cache/stats" >"$TMP/body"
check "... which stays warm" is "$(jb .warm_sessions)" 1
post /v1/cache/unpin '{"session_id":"sess-A"}' "${A[@]}"
check "A ends its own session" is "$CODE" 200
curl -s -m 10 "${ADM[@]}" "$URL/v1/cache/stats" >"$TMP/body"
check "... which is then gone" is "$(jb .warm_sessions)" 0
kvt_stop_server keyed

# ---- --hide-cached-tokens: no counts at all --------------------------------------------------
kvt_start_server hidden --hide-cached-tokens
complete "$(secret 42)"
complete "$(secret 42)"
check "hidden: the answer still comes" is "$(jb '.choices | length')" 1
check "hidden: no prompt_tokens_details" is "$(jb '.usage | has("prompt_tokens_details")')" false
check "hidden: the kvtier report says it is hidden" is "$(jb -c .kvtier)" '{"cache_report":"hidden"}'
curl -sN -m 60 -H 'Content-Type: application/json' \
  -d "{\"prompt\":\"$(secret 42)\",\"max_tokens\":2,\"stream\":true,\"stream_options\":{\"include_usage\":true}}" \
  "$URL/v1/completions" >"$TMP/sse"
check "hidden: no cached count in a stream either" is "$(grep -c cached "$TMP/sse")" 0
post /v1/cache/pin "{\"prompt\":\"$(secret 42)\"}"
check "hidden: a pin answers without its count" is "$(jb 'has("pin_id") and (has("pinned_tokens") | not)')" true
curl -s -m 10 "$URL/v1/cache/stats" >"$TMP/body"
check "hidden: stats hold no cache-wide counters" is "$(jb 'has("T0") or has("hit_tokens")')" false
CODE=$(curl -s -m 10 -o "$TMP/body" -w '%{http_code}' "$URL/metrics")
check "hidden: /metrics needs --metrics-key or --admin-key" is "$CODE" 403
kvt_stop_server hidden

# ---- start-up checks -------------------------------------------------------------------------
expect_rc 2 "$BIN" serve -m "$TMP/tiny.gguf" --port 0 --api-key same --admin-key same
check "an admin key that is also an API key is refused" grep -q "also an API key" "$TMP/out"
"$BIN" serve --help >"$TMP/help" 2>&1
for flag in --admin-key --explain-text --hide-cached-tokens; do
  check "serve --help explains $flag" grep -q -- "$flag" "$TMP/help"
done
kvt_test_done test_server_tenants
