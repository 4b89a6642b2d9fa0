#!/usr/bin/env bash
# The CPU a Responses follow-up costs the server at a long history, two
# builds side by side: for each history size it makes a conversation of one
# long user message, a reply and a second turn on each server, then sends the
# same short follow-up naming that response (store false, so nothing grows)
# REPS times to one server, then to the other, PAIRS times over, and prints
# the server's CPU per follow-up (perf stat's task-clock of all its
# threads) with kvtier.history_tokens_reused. The model is
# tiny (dim 64, 2 layers) so that the prompt's preparation (render and
# tokenize), not the model, is what a follow-up costs. Loopback only; prints
# numbers, never pass/fail.
# usage: BASE=path/to/old/kvtier bench/responses_history.sh [SIZES...]   (default 8000 30000 tokens)
# env: NEW (default ./build/kvtier), PAIRS (3), REPS (5), RENDER ("builtin jinja"), PORT0 (18100),
#      VOCAB (a vocabulary of ../shared/vocab, default ggml-vocab-llama-spm.gguf)
set -euo pipefail
cd "$(dirname "$0")/.."
NEW=${NEW:-./build/kvtier}
BASE=${BASE:?set BASE to the kvtier binary to compare with}
PAIRS=${PAIRS:-3} REPS=${REPS:-5} PORT0=${PORT0:-18100}
SIZES=("$@")
[ ${#SIZES[@]} -gt 0 ] || SIZES=(8000 30000)
KVT_BIN=$NEW
. tests/testutil.sh
vocab=../shared/vocab/${VOCAB:-ggml-vocab-llama-spm.gguf}
extra=()
[ -f "$vocab" ] && extra=(--vocab-from "$vocab")
"$NEW" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 --ctx 65536 "${extra[@]}" \
  >/dev/null 2>&1
printf '%s' "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + \
'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}" >"$TMP/chatml.jinja"
# words N: about N tokens of text (a numbered word is one to three tokens on SentencePiece)
words() {
  awk -v n="$1" 'BEGIN { split("cache block tier disk page memory prefix token reuse restore evict server request \
reply history agent", w, " "); for (i = 0; i < n / 3; i++) printf "%s%d ", w[i * 7 % 16 + 1], i % 97; print "" }'
}
# post_file PATH FILE: post (testutil.sh) of a body too long for an argument
post_file() { CODE=$(curl -s -m 900 -o "$TMP/body" -w '%{http_code}' -H 'Content-Type: application/json' \
  --data-binary @"$2" "$URL$1"); }

for render in ${RENDER:-builtin jinja}; do
  args=(-m "$TMP/m.gguf" --host 127.0.0.1 -t 1 -c 65536 --responses-max 64)
  [ "$render" = jinja ] && args+=(--jinja --chat-template-file "$TMP/chatml.jinja") || args+=(--no-jinja)
  declare -A ID=() PIDS=() URLS=()
  for b in base new; do
    bin=$BASE
    [ $b = new ] && bin=$NEW
    KVT_BIN=$bin BIN=$bin KVT_SERVE_WAIT_S=120 kvt_start_server "$b-$render" "${args[@]}" --port $((PORT0 + ${#PIDS[@]}))
    PIDS[$b]=$SRV_PID URLS[$b]=$URL
    for n in "${SIZES[@]}"; do
      words "$n" >"$TMP/words"
      jq -cn --rawfile t "$TMP/words" '{input: ("Read this and wait: " + $t), max_output_tokens: 8, temperature: 0}' \
        >"$TMP/req"
      post_file /v1/responses "$TMP/req"
      first=$(jb .id) got=$(jb .usage.input_tokens)
      post /v1/responses "{\"previous_response_id\":\"$first\",\"input\":\"Go on.\",\"max_output_tokens\":8,\"temperature\":0}"
      ID[$b-$n]=$(jb .id)
      echo "$render $b: history of $got tokens, then $(jb .usage.input_tokens) at turn 2"
    done
  done
  for n in "${SIZES[@]}"; do
    for p in $(seq 1 "$PAIRS"); do
      line="$render $n pair $p:"
      for b in base new; do
        URL=${URLS[$b]}
        req="{\"previous_response_id\":\"${ID[$b-$n]}\",\"input\":\"And then?\",\"max_output_tokens\":1,"
        req+="\"temperature\":0,\"store\":false}"
        # every thread of the server, those that live for one connection included
        perf stat -x, -e task-clock -p "${PIDS[$b]}" -o "$TMP/perf" -- bash -c 'for _ in $(seq 1 "$1"); do
          curl -s -m 900 -o "$2" -H "Content-Type: application/json" -d "$3" "$4/v1/responses"; done' _ \
          "$REPS" "$TMP/body" "$req" "$URL"
        ms=$(awk -F, '/task-clock/ {print $1}' "$TMP/perf")
        line+=" $b $(awk -v d="$ms" -v r="$REPS" 'BEGIN {printf "%.1f", d / r}') ms"
        line+=" (prompt $(jb .usage.input_tokens), reused $(jb '.kvtier.history_tokens_reused // "-"'))"
      done
      echo "$line; load $(cut -d' ' -f1 /proc/loadavg)"
    done
  done
  for b in base new; do kvt_stop_server "$b-$render" || true; done
  unset ID PIDS URLS
done
