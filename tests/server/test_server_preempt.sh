#!/usr/bin/env bash
# Replies that do not all fit the KV memory (--kv-active) at once: with four
# slots and a pool that holds under two of them, six concurrent clients
# (plain, streamed, sampled with a seed) all get 200, and the replies that
# paused for want of pages say so (kvtier.preempted) and resumed where they
# stopped: each reply, its logprobs and its streamed text equal the same
# request run alone. /metrics counts the pauses and the tokens put back, and
# a request of three choices that pause each other reports the pauses of all.
# Needs curl and jq.
set -u
command -v curl >/dev/null && command -v jq >/dev/null || { echo "SKIP: needs curl and jq"; exit 77; }
. "$(dirname "$0")/../testutil.sh"

"$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 >/dev/null 2>&1 || { echo "mkmodel failed"; exit 1; }
# 256 bytes of KV per token: 64K is 256 tokens (8 blocks of 32), 1.7 of the 150-token replies
kvt_start_server p -m "$TMP/m.gguf" --host 127.0.0.1 -t 1 --parallel 4 -c 512 --kv-active 64K --kv-ram 4M
check "the start-up line says what T0 holds" grep -q 'KV capacity T0 active 256 tokens' "$TMP/p.log"

# body I: request I's JSON (a prompt of its own, 120 tokens past end-of-text; odd ones sampled with a seed)
body() {
  local extra='"temperature": 0'
  [ $(($1 % 2)) = 1 ] && extra='"temperature": 0.8, "seed": '"$1"
  printf '{"prompt": "client %s asks about tiers and pages and blocks and memory %s", "max_tokens": 120, "ignore_eos": true, "logprobs": 2, %s%s}' \
    "$1" "$1$1$1" "$extra" "${2:-}"
}
sse_text() { grep '^data: {' "$1" | sed 's/^data: //' | jq -j '.choices[0]? | (.text // "")'; }

# clients: the six clients at once, each reply then checked against the same request alone
clients() {
  pids=()
  for i in 1 2 3 4 5 6; do
    if [ "$i" -le 2 ]; then
      curl -s -N -m 300 -o "$TMP/c$i" -w '%{http_code}' -H 'Content-Type: application/json' \
        -d "$(body "$i" ', "stream": true')" "$URL/v1/completions" >"$TMP/c$i.code" &
    else
      curl -s -m 300 -o "$TMP/c$i" -w '%{http_code}' -H 'Content-Type: application/json' \
        -d "$(body "$i")" "$URL/v1/completions" >"$TMP/c$i.code" &
    fi
    pids+=($!)
  done
  wait "${pids[@]}"
  paused=0
  for i in 1 2 3 4 5 6; do
    check "client $i: 200" is "$(cat "$TMP/c$i.code")" 200
    post /v1/completions "$(body "$i")"
    if [ "$i" -le 2 ]; then
      check "client $i: the streamed text equals the reply alone" is "$(sse_text "$TMP/c$i")" "$(jb '.choices[0].text')"
      check "client $i: ... ending [DONE]" is "$(grep '^data: ' "$TMP/c$i" | tail -n 1)" 'data: [DONE]'
    else
      check "client $i: the reply and its logprobs equal the reply alone" \
        is "$(jq -c '.choices[0] | [.text, .logprobs]' "$TMP/c$i")" "$(jb -c '.choices[0] | [.text, .logprobs]')"
      check "client $i: 120 tokens" is "$(jq .usage.completion_tokens "$TMP/c$i")" 120
      if [ "$(jq '.kvtier.preempted.times // 0' "$TMP/c$i")" -gt 0 ]; then
        paused=$((paused + 1))
        check "client $i: a paused reply says what it put back" \
          is "$(jq '.kvtier.preempted | .restored_tokens + .recomputed_tokens >= 30' "$TMP/c$i")" true
      fi
    fi
  done
}
# the clients overlap unless they start slowly (a loaded machine): a round without a pause is run
# again, at most three times in all
pauses() { curl -s "$URL/metrics" | awk '/^kvtier_preemptions_total /{print $2}'; }
for round in 1 2 3; do
  clients
  [ "$(pauses)" -gt 0 ] && break
  echo "# round $round: the clients did not overlap enough to pause; again"
done
curl -s "$URL/metrics" >"$TMP/metrics"
# n choices share the prompt and generate apart: three of 120 tokens do not fit the pool together,
# so some pause; the one report of the request counts the pauses of every choice
before=$(awk '/^kvtier_preemptions_total /{print $2}' "$TMP/metrics")
post /v1/completions "$(body 7 ', "n": 3')"
check "n 3: 200, every choice 120 tokens" is "$CODE $(jb '[.choices[].finish_reason] | unique | join(",")') $(jb .usage.completion_tokens)" "200 length 360"
after=$(curl -s "$URL/metrics" | awk '/^kvtier_preemptions_total /{print $2}')
check "n 3: choices paused" gt "$after" "$before"
check "n 3: the report counts the pauses of every choice" is "$(jb '.kvtier.preempted.times // 0')" "$((after - before))"
check "replies paused for want of KV memory" gt "$(awk '/^kvtier_preemptions_total /{print $2}' "$TMP/metrics")" 0
check "... and their tokens were put back, most from the cache" \
  gt "$(awk '/^kvtier_resumed_tokens_total\{source="cache"\} /{print $2}' "$TMP/metrics")" 0
check "... the server logged the pauses" grep -q 'pauses after .* generated tokens until pages free up' "$TMP/p.log"
echo "# $paused of the 4 plain replies paused; $(grep -c ' resumes: ' "$TMP/p.log") resumes in the log"

# ---- approximate reuse: a reply over placed documents never pauses --------------------------------
# Four layers, so that the placed KV (fresh for layers 0 and 1 only) differs from an exact run;
# 512 bytes a token: 384K is 24 blocks, and the approximate reply (~450 prompt tokens + 200) 21.
kvt_stop_server p
"$BIN" mkmodel -o "$TMP/m4.gguf" --dim 64 --layers 4 --heads 4 --kv-heads 2 --ff 128 >/dev/null 2>&1 || { echo "mkmodel failed"; exit 1; }
kvt_start_server a -m "$TMP/m4.gguf" --host 127.0.0.1 -t 1 --parallel 4 -c 1024 --kv-active 384K --kv-ram 8M --approximate-reuse
doc() { printf '{"id": "%s", "text": "%s"}' "$1" "$2"; }
DA=$(doc lyon "The warehouse in Lyon ships parcels on Mondays and Thursdays only. Trucks leave at noon.")
DB=$(doc refunds "Refunds go back to the original card within five business days of the return.")
DC=$(doc bees "Honeybees tell their sisters where flowers are with a waggle dance toward the nectar.")
ask() { # DOCS MAX_TOKENS [KVTIER-EXTRA [EXTRA]]: a greedy chat request over the documents, with logprobs
  printf '{"messages": [{"role": "system", "content": "Answer from the documents."}, {"role": "user", "content": "When does Lyon ship?"}], "max_tokens": %s, "temperature": 0, "logprobs": true, "ignore_eos": true, "kvtier": {"documents": [%s]%s}%s}' \
    "$2" "$1" "${3:-}" "${4:-}"
}
# each document stored after the same prefix, so A, C, B places C and B from them
for d in "$DA, $DB, $DC" "$DB, $DC, $DA" "$DC, $DA, $DB"; do post /v1/chat/completions "$(ask "$d" 4)"; done
post /v1/chat/completions "$(ask "$DA, $DC, $DB" 200 ', "reuse": "approximate"')"
check "approximate alone: documents placed" gt "$(jb '.kvtier.approximate_tokens // 0')" 0
alone=$(jb -c '.choices[0] | [.message.content, .logprobs]')
# two greedy choices over the placed prompt: both replies do not fit the pool, and neither may pause
# (its placed KV is in no cache, so a resume would recompute it exactly and change the rest of the
# reply): the younger choice ends with a 503, as before pauses existed, never with another reply
post /v1/chat/completions "$(ask "$DA, $DC, $DB" 200 ', "reuse": "approximate"' ', "n": 2')"
if [ "$CODE" = 200 ]; then
  check "approximate, n 2: each choice is the reply alone" \
    test "$(jb -c '[.choices[] | [.message.content, .logprobs]] | unique')" = "[$alone]"
else
  check "approximate, n 2: a 503 to retry" is "$CODE" 503
fi
check "approximate, n 2: no choice paused" is "$(curl -s "$URL/metrics" | awk '/^kvtier_preemptions_total /{print $2}')" 0
kvt_test_done test_server_preempt
