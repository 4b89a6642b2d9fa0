#!/usr/bin/env bash
# Approximate reuse over HTTP (docs/rag.md "Approximate reuse"), with a generated model:
# - off by default: kvtier.reuse "approximate" on a server without --approximate-reuse is a
#   400 naming kvtier.reuse; so is it with a seed, on /v1/cache/prefill, and a bad value or a
#   recompute_ratio without it;
# - without the field a reordered request is answered exactly: text and logprobs equal a cold
#   server's, and the report has no approximate part;
# - with it, documents the exact prefix misses are placed: kvtier.approximate_tokens and the
#   approximate object report them, /metrics counts them; with recompute_ratio 1 the answer
#   (text and logprobs) equals a cold server's.
# - the documents are placed in prefill chunks, one per engine step: with --prefill-chunk 8 the
#   report counts at least (placed + recomputed) / 8 steps, the ratio-1 answer is still a cold
#   server's, and a generation streaming meanwhile gets decode tokens during those steps
#   (approximate.interleaved_decode_tokens > 0; it runs for up to 8000 tokens, far longer than
#   the placement);
# - `kvtier run -f` takes the same fields on a JSON line and reports the approximate tokens on
#   its stats line; with --seed such a line is refused.
# Needs curl and jq.
set -u
command -v curl >/dev/null && command -v jq >/dev/null || { echo "SKIP: needs curl and jq"; exit 77; }
. "$(dirname "$0")/../testutil.sh"
has() { case "$1" in *"$2"*) return 0 ;; esac; echo "  '$1' lacks '$2'" >&2; return 1; }
KVT_SERVE_ARGS=(-m "$TMP/tiny.gguf" --host 127.0.0.1 -t 1 -c 1024)
DA='{"id": "lyon", "text": "The warehouse in Lyon ships parcels on Mondays and Thursdays only. Trucks leave at noon."}'
DB='{"id": "refunds", "text": "Refunds go back to the original card within five business days of the return."}'
DC='{"id": "bees", "text": "Honeybees tell their sisters where flowers are with a waggle dance toward the nectar."}'
req() { # DOCS-JSON-ARRAY KVTIER-EXTRA-JSON [TOP-LEVEL-EXTRA]: a greedy chat request with logprobs
  jq -cn --argjson d "$1" --argjson x "$2" --argjson t "${3:-{\}}" \
    '{messages: [{role: "system", content: "Answer from the documents."}, {role: "user", content: "When does Lyon ship?"}],
      max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 3, ignore_eos: true,
      kvtier: ({documents: $d} + $x)} + $t'
}
answer() { jq -c '{text: .choices[0].message.content, lp: .choices[0].logprobs}' "$TMP/body"; }

"$BIN" mkmodel -o "$TMP/tiny.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 --ctx 1024 >/dev/null 2>&1 ||
  { echo "mkmodel failed"; exit 1; }
ABC="[$DA, $DB, $DC]" CAB="[$DC, $DA, $DB]" BCA="[$DB, $DC, $DA]"

# ---- off by default -----------------------------------------------------------------------
kvt_start_server plain
post /v1/chat/completions "$(req "$CAB" '{"reuse": "approximate"}')"
check "approximate without --approximate-reuse: 400" is "$CODE" 400
check "... naming kvtier.reuse" is "$(jb .error.param)" kvtier.reuse
check "... saying how to turn it on" has "$(jb .error.message)" "--approximate-reuse"
# the exact answers of a cold server (each prompt on a fresh cache: a salt of its own)
post /v1/chat/completions "$(req "$CAB" '{}' '{"cache_salt": "cold1"}')"; COLD_CAB=$(answer)
post /v1/chat/completions "$(req "$BCA" '{}' '{"cache_salt": "cold2"}')"; COLD_BCA=$(answer)

# ---- with --approximate-reuse -------------------------------------------------------------
kvt_start_server blend --approximate-reuse
post /v1/chat/completions "$(req "$CAB" '{"reuse": "approximate"}' '{"seed": 7}')"
check "approximate with a seed: 400" is "$CODE" 400
check "... naming kvtier.reuse" is "$(jb .error.param)" kvtier.reuse
check "... and the seed" has "$(jb .error.message)" "seed"
post /v1/chat/completions "$(req "$CAB" '{"reuse": "approximately"}')"
check "a bad kvtier.reuse: 400 naming it" is "$CODE/$(jb .error.param)" 400/kvtier.reuse
post /v1/chat/completions "$(req "$CAB" '{"recompute_ratio": 0.5}')"
check "recompute_ratio without approximate: 400 naming it" is "$CODE/$(jb .error.param)" 400/kvtier.recompute_ratio
post /v1/chat/completions "$(req "$CAB" '{"reuse": "approximate", "recompute_ratio": 2}')"
check "recompute_ratio out of [0, 1]: 400 naming it" is "$CODE/$(jb .error.param)" 400/kvtier.recompute_ratio
post /v1/cache/prefill "$(req "$CAB" '{"reuse": "approximate"}')"
check "approximate on /v1/cache/prefill: 400 naming kvtier.reuse" is "$CODE/$(jb .error.param)" 400/kvtier.reuse

post /v1/chat/completions "$(req "$ABC" '{}')"
check "first request (A, B, C): 200" is "$CODE" 200
check "without the field the report has no approximate part" is "$(jb '.kvtier | has("approximate_tokens")')" false
# C, A, B without the opt-in: exact, the cold server's answer
post /v1/chat/completions "$(req "$CAB" '{}')"
check "reordered, no opt-in: the cold answer" is "$(answer)" "$COLD_CAB"
check "... with nothing approximate" is "$(jb '.kvtier.approximate_tokens // "none"')" none
# B, C, A with approximate reuse and ratio 1: C and A are placed from [P][C] and [P][A], all recomputed
post /v1/chat/completions "$(req "$BCA" '{"reuse": "approximate", "recompute_ratio": 1}')"
check "ratio 1: 200" is "$CODE" 200
check "ratio 1: the cold answer, text and logprobs" is "$(answer)" "$COLD_BCA"
check "ratio 1: two documents placed" is "$(jb .kvtier.approximate.documents)" 2
check "ratio 1: every placed token recomputed" is "$(jb .kvtier.approximate.recomputed_tokens)" "$(jb .kvtier.approximate.placed_tokens)"
check "ratio 1: nothing reused approximately" is "$(jb .kvtier.approximate_tokens)" 0
# [P][B] was not stored before (B was never first): computed, and exact reuse covers it now
post /v1/chat/completions "$(req "$BCA" '{"reuse": "approximate"}')"
check "default ratio: 200" is "$CODE" 200
placed=$(jb .kvtier.approximate.placed_tokens) rec=$(jb .kvtier.approximate.recomputed_tokens)
check "default ratio: tokens placed" gt "$placed" 0
check "default ratio: 15% of them recomputed" is "$rec" "$(awk -v p="$placed" 'BEGIN { printf "%d", p * 0.15 + 0.5 }')"
check "default ratio: the rest reused approximately" is "$(jb .kvtier.approximate_tokens)" "$((placed - rec))"
check "default ratio: nothing to store now" is "$(jb .kvtier.approximate.stored_tokens)" 0
check "default ratio: the ratio reported" is "$(jb .kvtier.approximate.recompute_ratio)" 0.15
computed=$(jb .kvtier.computed_tokens) cached=$(jb .kvtier.cached_tokens) prompt=$(jb .usage.prompt_tokens)
check "computed + cached + approximate = prompt" is "$((computed + cached + placed - rec))" "$prompt"
# the exact request over the same prompt after approximate ones: still the cold answer
post /v1/chat/completions "$(req "$BCA" '{}')"
check "exact after approximate: the cold answer (nothing approximate was cached)" is "$(answer)" "$COLD_BCA"
M=$(curl -s "$URL/metrics")
check "/metrics counts the approximate requests" has "$M" "kvtier_approximate_requests_total 2"
check "/metrics counts approximate tokens" has "$M" "kvtier_approximate_tokens_total $((placed - rec))"
check "/metrics counts recomputed tokens" has "$M" "kvtier_approximate_recomputed_tokens_total $((placed + rec))"

# ---- placement in prefill chunks, with another request decoding meanwhile -----------------
"$BIN" mkmodel -o "$TMP/long.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 --ctx 8192 >/dev/null 2>&1 ||
  { echo "mkmodel failed"; exit 1; }
KVT_SERVE_ARGS=(-m "$TMP/long.gguf" --host 127.0.0.1 -t 1 -c 8192)
kvt_start_server chunked --approximate-reuse --prefill-chunk 8 --parallel 2 --max-tokens-limit 8192
post /v1/chat/completions "$(req "$BCA" '{}' '{"cache_salt": "cold3"}')"; COLD_LONG=$(answer)
post /v1/chat/completions "$(req "$ABC" '{}')"
check "chunked: first request (A, B, C): 200" is "$CODE" 200
# a long generation, streamed; once its first token is out, the approximate request comes
curl -sN -m 300 -H 'Content-Type: application/json' \
  -d '{"prompt": "Once upon a time", "max_tokens": 8000, "temperature": 0, "ignore_eos": true, "stream": true}' \
  "$URL/v1/completions" >"$TMP/long.sse" 2>/dev/null &
LONG_PID=$!
for _ in $(seq 1 1200); do grep -q '^data: {' "$TMP/long.sse" 2>/dev/null && break; sleep 0.05; done
post /v1/chat/completions "$(req "$BCA" '{"reuse": "approximate", "recompute_ratio": 1}')"
check "chunked: 200" is "$CODE" 200
check "chunked, ratio 1: the cold answer, text and logprobs" is "$(answer)" "$COLD_LONG"
placed=$(jb .kvtier.approximate.placed_tokens) rec=$(jb .kvtier.approximate.recomputed_tokens)
steps=$(jb .kvtier.approximate.steps) inter=$(jb .kvtier.approximate.interleaved_decode_tokens)
check "chunked: documents placed" gt "$placed" 0
check "chunked: at most 8 tokens of work a step" ge "$steps" "$(((placed + rec + 7) / 8))"
check "chunked: the streaming generation decoded during the placement" gt "$inter" 0
check "chunked: at most one decode token of it a step" ge "$steps" "$inter"
kill "$LONG_PID" 2>/dev/null; wait "$LONG_PID" 2>/dev/null
check "chunked: the streaming generation was still going (not ended by length)" is \
  "$(grep -c '"finish_reason":"length"' "$TMP/long.sse")" 0

# ---- kvtier run -f ---------------------------------------------------------------------------
line() { jq -cn --argjson d "$1" --argjson x "$2" '{prompt: "When does Lyon ship?", kvtier: ({documents: $d} + $x)}'; }
{ line "$ABC" '{}'; line "$BCA" '{"reuse": "approximate"}'; line "$BCA" '{"reuse": "approximate", "recompute_ratio": 1}'; } \
  >"$TMP/lines.jsonl"
"$BIN" run -m "$TMP/tiny.gguf" -c 1024 -n 4 --temp 0 -f "$TMP/lines.jsonl" >"$TMP/run.out" 2>"$TMP/run.log"
check "run -f with approximate lines: exit 0" is "$?" 0
check "run -f: the stats line reports approximate reuse" has "$(grep '\[2/3\]' "$TMP/run.log")" "documents placed"
check "run -f: ratio 1 recomputes every placed token" has "$(grep '\[3/3\]' "$TMP/run.log")" "approximate 0 ("
"$BIN" run -m "$TMP/tiny.gguf" -c 1024 -n 4 --temp 0 --seed 1 -f "$TMP/lines.jsonl" >/dev/null 2>"$TMP/run-seed.log"
check "run -f: approximate with --seed is refused" has "$(cat "$TMP/run-seed.log")" "cannot be combined with --seed"

kvt_test_done test_server_blend
