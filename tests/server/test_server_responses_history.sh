#!/usr/bin/env bash
# Responses follow-ups (previous_response_id) take the stored response's
# prompt and reply ids for their history instead of rendering and tokenizing
# it again (kvtier.history_tokens_reused), under the built-in ChatML rendering
# and under a ChatML Jinja template. Over a 6-turn chain each follow-up takes
# the whole previous prompt and reply as ids, its cached tokens cover them to
# the last full block, and its greedy text and prompt length equal those of
# the same conversation sent turn by turn as chat history to a fresh server,
# which renders and tokenizes it whole (splicing the replies it generated).
# A template that writes the history otherwise on the next turn (Qwen3's
# with enable_thinking false: the empty thought it puts after the generation
# prompt is not written back with the reply) falls back to the full rendering
# and says so (history_rerendered "rewritten"), with the same text as the
# fresh server; so does a follow-up whose instructions changed ("messages").
# A tool chain (user, call, result, call, result, answer) under the built-in
# ChatML and Llama 3 renderings does the same: each follow-up after a call
# takes the previous prompt and call as ids, and its calls and answer equal
# those of a fresh server sent the conversation as chat turns.
# Needs curl and jq.
set -u
command -v curl >/dev/null && command -v jq >/dev/null || { echo "SKIP: needs curl and jq"; exit 77; }
. "$(dirname "$0")/../testutil.sh"
# a real vocabulary, where the markup is plain text and the seam after a reply is tokenized for real
kvt_spm_model "$TMP/m.gguf"
printf '%s' "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + \
'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}" >"$TMP/chatml.jinja"
# Qwen3's way with history: an assistant turn keeps its answer after any </think>, and with
# enable_thinking false the generation prompt ends in an empty thought that history never shows
printf '%s' "{% for m in messages %}{% if m.role == 'assistant' %}{{ '<|im_start|>assistant\\n' + \
m.content.split('</think>')[-1].lstrip('\\n') + '<|im_end|>\\n' }}{% else %}{{ '<|im_start|>' + m.role + '\\n' + \
m.content + '<|im_end|>\\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}\
{% if enable_thinking is defined and enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}{% endif %}" \
  >"$TMP/qwen3.jinja"
KVT_SERVE_ARGS=(--host 127.0.0.1 -t 1 -c 2048)
INS="You answer questions about tiered caches."
U1="You are a careful assistant. Please tell me a long story about a cache that remembered every block it saw."
question() { if [ "$1" = 1 ]; then echo "$U1"; else echo "And what happened in part $1 of the story?"; fi; }
declare -a TEXT P C REUSED WHY CACHED STATUS CTEXT CP

# chain N: N responses, each after the one before (previous_response_id); per turn its text, token
# counts, kvtier.history_tokens_reused ("none" when absent), history_rerendered, cached tokens, status
chain() {
  local prev='' t body
  for t in $(seq 1 "$1"); do
    body=$(jq -cn --arg i "$INS" --arg q "$(question "$t")" --arg p "$prev" \
      '{instructions: $i, input: $q, max_output_tokens: 24, temperature: 0} + if $p == "" then {} else {previous_response_id: $p} end')
    post /v1/responses "$body"
    [ "$CODE" = 200 ] || { echo "turn $t: HTTP $CODE: $(head -c 300 "$TMP/body")"; return 1; }
    TEXT[t]=$(jb '.output[0].content[0].text') P[t]=$(jb .usage.input_tokens) C[t]=$(jb .usage.output_tokens)
    REUSED[t]=$(jb '.kvtier.history_tokens_reused // "none"') WHY[t]=$(jb '.kvtier.history_rerendered // ""')
    CACHED[t]=$(jb .usage.input_tokens_details.cached_tokens) STATUS[t]=$(jb .status)
    LAST_ID=$(jb .id) LAST_BODY=$(cat "$TMP/body")
    prev=$LAST_ID
  done
}

# replay N: the same conversation as chat completions, each turn sending the replies back as history
replay() {
  local m t
  m=$(jq -cn --arg i "$INS" '[{role: "system", content: $i}]')
  for t in $(seq 1 "$1"); do
    m=$(jq -c --arg q "$(question "$t")" '. + [{role: "user", content: $q}]' <<<"$m")
    post /v1/chat/completions "{\"messages\":$m,\"max_tokens\":24,\"temperature\":0}"
    CTEXT[t]=$(jb '.choices[0].message.content') CP[t]=$(jb .usage.prompt_tokens)
    m=$(jq -c --arg r "${CTEXT[t]}" '. + [{role: "assistant", content: $r}]' <<<"$m")
  done
}

# checks WHAT N: the chain's follow-ups took the whole previous prompt and reply as ids, reused their
# KV, and match the replay
checks() {
  local what=$1 n=$2 t b want
  echo "$what: prompt tokens ${P[*]:1:n}, history tokens reused ${REUSED[*]:1:n}, cached ${CACHED[*]:1:n}"
  check "$what: turn 1 names no history" is "${REUSED[1]}" none
  for t in $(seq 2 "$n"); do
    b=$((t - 1))
    # a reply cut by max_output_tokens is all text; one that ended with EOS has that token unwritten
    want=$((P[b] + C[b]))
    [ "${STATUS[b]}" = incomplete ] || want=$((P[b] + C[b] - 1))
    check "$what: turn $t's history is turn $b's prompt and reply as ids (${REUSED[t]} of $want), not tokenized" \
      is "${REUSED[t]}" "$want"
    check "$what: ... with no fallback" is "${WHY[t]}" ""
    check "$what: ... its cached tokens (${CACHED[t]}) cover them to the last full block" \
      ge "${CACHED[t]}" $(((P[b] + C[b] - 1) / BLOCK * BLOCK))
    check "$what: ... its prompt is as long as the whole rendering's (${P[t]})" is "${P[t]}" "${CP[t]}"
    check "$what: ... and its greedy text is the fresh server's" is "${TEXT[t]}" "${CTEXT[t]}"
  done
}

TURNS=6
# ---- the built-in ChatML rendering -------------------------------------------------------------------
kvt_start_server family -m "$TMP/m.gguf" --no-jinja
curl -s -m 20 -o "$TMP/body" "$URL/props"
BLOCK=$(jb .block_size)
chain $TURNS || exit 1
body=$(jq -cn --arg p "$LAST_ID" '{instructions: "Other instructions.", input: "One more?", previous_response_id: $p, max_output_tokens: 4, temperature: 0}')
post /v1/responses "$body"
check "built-in: a follow-up with other instructions is answered" is "$CODE" 200
check "... rendered whole, saying the messages differ" is "$(jb -c '[.kvtier.history_tokens_reused, .kvtier.history_rerendered]')" '[0,"messages"]'
kvt_stop_server family
kvt_start_server family_fresh -m "$TMP/m.gguf" --no-jinja
replay $TURNS
kvt_stop_server family_fresh
checks built-in $TURNS

# ---- a ChatML Jinja template ----------------------------------------------------------------------------
kvt_start_server jinja -m "$TMP/m.gguf" --jinja --chat-template-file "$TMP/chatml.jinja"
chain $TURNS || exit 1
kvt_stop_server jinja
kvt_start_server jinja_fresh -m "$TMP/m.gguf" --jinja --chat-template-file "$TMP/chatml.jinja"
replay $TURNS
kvt_stop_server jinja_fresh
checks jinja $TURNS

# ---- a template that writes the history otherwise: the full rendering, said so --------------------------
Q3=(-m "$TMP/m.gguf" --jinja --chat-template-file "$TMP/qwen3.jinja" --chat-template-kwargs '{"enable_thinking":false}')
kvt_start_server q3 "${Q3[@]}"
chain 3 || exit 1
kvt_stop_server q3
kvt_start_server q3_fresh "${Q3[@]}"
replay 3
kvt_stop_server q3_fresh
for t in 2 3; do
  check "qwen3: turn $t falls back to the whole rendering, saying the template rewrote the history" \
    is "${REUSED[t]}/${WHY[t]}" "0/rewritten"
  check "... with the whole rendering's prompt (${P[t]})" is "${P[t]}" "${CP[t]}"
  check "... and the fresh server's greedy text" is "${TEXT[t]}" "${CTEXT[t]}"
done
check "... whose report names the turn the template rewrote" is "$(jq -c '.kvtier.rerendered_turn.reason' <<<"$LAST_BODY")" '"rewritten"'

# ---- a tool chain under the built-in families: user -> call -> result -> call -> result -> answer ----------
# Each follow-up names the response before it and sends the result of its call. The call turns are
# replies this server generated, so each follow-up takes the previous prompt and reply as ids, its
# cached tokens cover them, and its calls and answer are those of the same conversation sent turn by
# turn as chat messages (the calls returned re-serialized, as SDKs do) to a fresh server.
TOOLS='[{"type":"function","name":"get_weather","description":"The weather in a city","parameters":{"type":"object",
 "properties":{"city":{"type":"string","maxLength":12},"unit":{"enum":["c","f"]}},"required":["city","unit"],
 "additionalProperties":false}}]'
CHAT_TOOLS=$(jq -c 'map({type: "function", function: (del(.type))})' <<<"$TOOLS")
TQ="What is the weather in Paris, and then in Rome?"
RESULTS=("" "sunny, 21 C" "rain, 14 C")
declare -a OUT COUT
# tool_chain: three responses; the first two forced calls, the last an answer
tool_chain() {
  local t prev='' input choice body
  for t in 1 2 3; do
    if [ "$t" = 1 ]; then input=$(jq -cn --arg q "$TQ" '[{role: "user", content: $q}]')
    else input=$(jq -cn --arg c "$CALL_ID" --arg o "${RESULTS[t - 1]}" '[{type: "function_call_output", call_id: $c, output: $o}]'); fi
    choice=required; [ "$t" = 3 ] && choice=none
    body=$(jq -cn --argjson i "$input" --argjson tools "$TOOLS" --arg c "$choice" --arg p "$prev" \
      '{input: $i, tools: $tools, tool_choice: $c, max_output_tokens: 60, temperature: 0} + if $p == "" then {} else {previous_response_id: $p} end')
    post /v1/responses "$body"
    [ "$CODE" = 200 ] || { echo "tool turn $t: HTTP $CODE: $(head -c 300 "$TMP/body")"; return 1; }
    OUT[t]=$(jb -c '[.output[] | if .type == "function_call" then [.name, (.arguments | fromjson)] else .content[0].text end]')
    P[t]=$(jb .usage.input_tokens) C[t]=$(jb .usage.output_tokens) STATUS[t]=$(jb .status)
    REUSED[t]=$(jb '.kvtier.history_tokens_reused // "none"') WHY[t]=$(jb '.kvtier.history_rerendered // ""')
    CACHED[t]=$(jb .usage.input_tokens_details.cached_tokens)
    CALL_ID=$(jb '[.output[] | select(.type == "function_call")][0].call_id // ""')
    prev=$(jb .id)
  done
}
# tool_replay: the same conversation as chat completions to this server, each call sent back with its
# arguments re-serialized; the chat steps' cached tokens too
declare -a CCACHED
tool_replay() {
  local t m choice msg
  m=$(jq -cn --arg q "$TQ" '[{role: "user", content: $q}]')
  for t in 1 2 3; do
    choice=required; [ "$t" = 3 ] && choice=none
    post /v1/chat/completions "{\"messages\":$m,\"tools\":$CHAT_TOOLS,\"tool_choice\":\"$choice\",\"max_tokens\":60,\"temperature\":0}"
    msg=$(jb -c '.choices[0].message | .tool_calls |= (if . then map(.function.arguments |= (fromjson | tojson)) else . end)')
    COUT[t]=$(jq -c '[(.content // empty), (.tool_calls // [] | .[] | [.function.name, (.function.arguments | fromjson)])]' <<<"$msg")
    CP[t]=$(jb .usage.prompt_tokens) CCACHED[t]=$(jb .usage.prompt_tokens_details.cached_tokens)
    CPC[t]=$(( CP[t] + $(jb .usage.completion_tokens) ))
    m=$(jq -c --argjson a "$msg" '. + [$a]' <<<"$m")
    [ "$t" = 3 ] || m=$(jq -c --argjson a "$msg" --arg o "${RESULTS[t]}" '. + [{role: "tool", tool_call_id: $a.tool_calls[0].id, content: $o}]' <<<"$m")
  done
}
declare -a CPC
for fam in chatml llama3; do
  kvt_start_server "t_$fam" -m "$TMP/m.gguf" --no-jinja --chat-template "$fam"
  tool_chain || exit 1
  kvt_stop_server "t_$fam"
  kvt_start_server "t_${fam}_fresh" -m "$TMP/m.gguf" --no-jinja --chat-template "$fam"
  tool_replay
  kvt_stop_server "t_${fam}_fresh"
  echo "$fam tools: prompt tokens ${P[*]:1:3}, history tokens reused ${REUSED[*]:1:3}, cached ${CACHED[*]:1:3}; chat cached ${CCACHED[*]:1:3}"
  check "$fam tools: turns 1 and 2 are calls" is "$(jq -c 'map(type)' <<<"${OUT[1]}")/$(jq -c 'map(type)' <<<"${OUT[2]}")" '["array"]/["array"]'
  for t in 2 3; do
    b=$((t - 1))
    # a forced call ends when it is complete, with no end-of-generation token: every token is written
    check "$fam tools: turn $t's history is turn $b's prompt and call as ids (${REUSED[t]})" \
      is "${REUSED[t]}/${WHY[t]}" "$((P[b] + C[b]))/"
    check "$fam tools: ... its cached tokens (${CACHED[t]}) cover them to the last full block" \
      ge "${CACHED[t]}" $(((P[b] + C[b] - 1) / BLOCK * BLOCK))
    check "$fam tools: ... the chat step's too (${CCACHED[t]})" ge "${CCACHED[t]}" $(((CPC[b] - 1) / BLOCK * BLOCK))
    check "$fam tools: ... its prompt is the fresh server's (${P[t]})" is "${P[t]}" "${CP[t]}"
  done
  for t in 1 2 3; do
    check "$fam tools: turn $t's greedy output is the fresh server's" is "${OUT[t]}" "${COUT[t]}"
  done
done

kvt_test_done test_server_responses_history
