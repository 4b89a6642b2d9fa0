#!/usr/bin/env bash
# Greedy output never depends on batch composition, concurrency, timing or
# cache hits: N chat requests with different prompts, most sharing a long
# system prompt, are first run one at a time on a fresh server, each cold (its
# own cache_salt), as the reference. The same requests then run all at once on
# fresh servers (--parallel 4 with small prefill chunks, so prompts interleave
# and hit each other's prefix blocks while those are still being written;
# --parallel 1, so they queue; streamed), and again on the now warm server
# (every prompt cached). Every reply must be byte-identical to the reference,
# text and logprobs alike (the logprobs are printed from the logits, so equal
# logprobs mean equal logits bits, not merely the same argmax).
# Needs curl and jq.
set -u
command -v curl >/dev/null && command -v jq >/dev/null || { echo "SKIP: needs curl and jq"; exit 77; }
. "$(dirname "$0")/../testutil.sh"
# a real vocabulary where there is one (text, not bytes; ~300-token prompts), else mkmodel's own
VOCAB=${KVT_SHARED:-}/vocab/ggml-vocab-llama-spm.gguf
extra=()
if [ -n "${KVT_SHARED:-}" ] && [ -f "$VOCAB" ]; then
  extra=(--vocab 32000 --vocab-from "$VOCAB")
else
  kvt_test_skip_part "no ${KVT_SHARED:-../shared}/vocab/ggml-vocab-llama-spm.gguf: the checks ran on mkmodel's \
byte vocabulary, not a real one"
fi
"$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 --ctx 4096 "${extra[@]}" >/dev/null 2>&1 ||
  { echo "mkmodel failed"; exit 1; }

KVT_SERVE_ARGS=(-m "$TMP/m.gguf" --host 127.0.0.1 -t 1 --ctx 4096)

# the requests: 6 share a long system prompt (a cached prefix of several blocks), 2 do not
SYS="You are an agent that plans steps, calls tools and checks results. $(for i in $(seq 24); do printf 'rule %s: keep the cache warm between steps and reuse what was computed. ' "$i"; done)"
N=8
body() { # I [EXTRA_JSON]: request I's body
  local i=$1 extra=${2:-} msgs
  if [ "$i" -le 6 ]; then
    msgs="[{\"role\":\"system\",\"content\":\"$SYS\"},{\"role\":\"user\",\"content\":\"Task $i: $(printf 'step %.0s' $(seq $((i * 3)))) now answer.\"}]"
  else
    msgs="[{\"role\":\"user\",\"content\":\"A different request $i without the system prompt, $(printf 'word%s ' $(seq $((i * 5))))\"}]"
  fi
  printf '{"messages":%s,"max_tokens":16,"temperature":0,"logprobs":true,"top_logprobs":3%s}' "$msgs" "$extra"
}
send() { # I OUT [EXTRA_JSON]
  curl -s -m 120 -o "$2" -H 'Content-Type: application/json' -d "$(body "$1" "${3:-}")" "$URL/v1/chat/completions"
}
# reply OUT.json: the text, then the logprobs, as exact bytes
reply() { jq -j '.choices[0].message.content' "$1" 2>/dev/null; echo; jq -c '.choices[0].logprobs' "$1" 2>/dev/null; }
# same_as_ref PREFIX: how many of $TMP/PREFIX$i.json equal the reference with 16 tokens
same_as_ref() {
  local n=0
  for i in $(seq $N); do
    [ "$(jq -r .usage.completion_tokens "$TMP/$1$i.json" 2>/dev/null)" = 16 ] &&
      [ "$(reply "$TMP/$1$i.json")" = "$(cat "$TMP/ref$i")" ] && n=$((n + 1))
  done
  echo "$n"
}
# concurrent PREFIX [EXTRA_JSON]: all N requests at once
concurrent() {
  local c=() i
  for i in $(seq $N); do send "$i" "$TMP/$1$i.json" "${2:-}" & c+=($!); done
  for i in "${c[@]}"; do wait "$i"; done
}

# ---- reference: one at a time, each cold, on a fresh server ------------------------------------
kvt_start_server solo --parallel 4
for i in $(seq $N); do
  send "$i" "$TMP/solo$i.json" ",\"cache_salt\":\"solo$i\""
  reply "$TMP/solo$i.json" >"$TMP/ref$i"
  jq -j '.choices[0].message.content' "$TMP/solo$i.json" >"$TMP/reftext$i"
done
check "reference requests complete" is "$(cat "$TMP"/solo*.json | jq -s 'map(.usage.completion_tokens) | add')" $((16 * N))
check "reference requests were cold" is "$(cat "$TMP"/solo*.json | jq -s 'map(.usage.prompt_tokens_details.cached_tokens) | add')" 0
check "the prompts differ, so the replies do" [ "$(md5sum "$TMP"/reftext* | cut -d' ' -f1 | sort -u | wc -l)" -gt 1 ]
kvt_stop_server solo

# ---- all at once on a fresh server: interleaved prefill chunks, shared prefix written meanwhile -
kvt_start_server par --parallel 4 --prefill-chunk 16
concurrent par
check "8 concurrent on a fresh server (--parallel 4, 16-token prefill chunks) = one at a time ($(same_as_ref par)/$N)" \
  is "$(same_as_ref par)" $N
# ---- again on the same, now warm server: every prompt is a cache hit -----------------------------
concurrent warm
check "warm repeat: every prompt reused cached blocks" \
  is "$(cat "$TMP"/warm*.json | jq -s 'map(select(.usage.prompt_tokens_details.cached_tokens > 0)) | length')" $N
check "8 concurrent cache hits = one at a time cold ($(same_as_ref warm)/$N)" is "$(same_as_ref warm)" $N
kvt_stop_server par

# ---- a fresh server, shared prefix warmed first, then the rest queued through one slot -----------
kvt_start_server np1 --parallel 1
send 1 "$TMP/np1_1.json"
c=()
for i in $(seq 2 $N); do send "$i" "$TMP/np1_$i.json" & c+=($!); done
for p in "${c[@]}"; do wait "$p"; done
check "later requests hit the warmed system prompt" \
  is "$(cat "$TMP"/np1_[2-6].json | jq -s 'map(select(.usage.prompt_tokens_details.cached_tokens > 0)) | length')" 5
for i in $(seq $N); do cp "$TMP/np1_$i.json" "$TMP/np1x$i.json"; done
check "--parallel 1, queued, prefix hits = one at a time cold ($(same_as_ref np1x)/$N)" is "$(same_as_ref np1x)" $N
kvt_stop_server np1

# ---- streamed, all at once, --parallel 2: the deltas join to the same text ---------------------
kvt_start_server stream --parallel 2
c=()
for i in $(seq $N); do
  curl -s -m 120 -N -o "$TMP/sse$i" -H 'Content-Type: application/json' \
    -d "$(body "$i" ',"stream":true')" "$URL/v1/chat/completions" & c+=($!)
done
for p in "${c[@]}"; do wait "$p"; done
n=0
for i in $(seq $N); do
  grep '^data: {' "$TMP/sse$i" | sed 's/^data: //' | jq -j '.choices[0]?.delta.content // ""' >"$TMP/ssetext$i"
  cmp -s "$TMP/ssetext$i" "$TMP/reftext$i" && n=$((n + 1))
done
check "8 concurrent streams (--parallel 2) = one at a time ($n/$N)" is "$n" $N
kvt_stop_server stream

# ---- chat history: with --retokenize-replies a follow-up turn depends on the request alone -----
# (by default a server splices its own replies back as the ids it generated, which a fresh server
# cannot know; docs/api.md "Chat templates, chat history and determinism")
turn2() { # REPLY_FILE: turn 1's messages, the reply, one more user message
  local r; r=$(jq -c '.choices[0].message.content' "$1")
  printf '{"messages":[{"role":"system","content":"%s"},{"role":"user","content":"Task 1: step step step now answer."},{"role":"assistant","content":%s},{"role":"user","content":"And the next step?"}],"max_tokens":16,"temperature":0,"logprobs":true,"top_logprobs":3}' "$SYS" "$r"
}
kvt_start_server rt1 --retokenize-replies
send 1 "$TMP/rt_turn1.json"
curl -s -m 120 -o "$TMP/rt_a.json" -H 'Content-Type: application/json' -d "$(turn2 "$TMP/rt_turn1.json")" "$URL/v1/chat/completions"
check "--retokenize-replies: turn 2 reuses turn 1's cached prefix" [ "$(jq -r '.usage.prompt_tokens_details.cached_tokens' "$TMP/rt_a.json")" -gt 0 ]
kvt_stop_server rt1
kvt_start_server rt2 --retokenize-replies
curl -s -m 120 -o "$TMP/rt_b.json" -H 'Content-Type: application/json' -d "$(turn2 "$TMP/rt_turn1.json")" "$URL/v1/chat/completions"
check "--retokenize-replies: turn 2 on a fresh server has the same prompt" \
  is "$(jq -r '.usage.prompt_tokens' "$TMP/rt_b.json")" "$(jq -r '.usage.prompt_tokens' "$TMP/rt_a.json")"
check "--retokenize-replies: turn 2 on a fresh server = on the server that generated turn 1" \
  is "$(reply "$TMP/rt_b.json")" "$(reply "$TMP/rt_a.json")"
kvt_stop_server rt2

kvt_test_done test_server_determinism
