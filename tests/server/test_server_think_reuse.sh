#!/usr/bin/env bash
# Reuse of a reply with reasoning under a Jinja template. The reply is split
# into reasoning_content and content (the default --reasoning-format), and a
# client sends it back as content alone or with the same reasoning_content:
# - a template that renders reasoning_content where the model wrote it: the
#   reply sent back with its reasoning is recognised and spliced as its exact
#   ids, so the next turn reuses the whole previous sequence;
# - a template that drops earlier turns' reasoning (Qwen3's): the turn is
#   rendered as the template does, everything before it is still reused, and
#   kvtier.rerendered_turn says reason "reasoning_dropped";
# - the built-in qwen3 rendering: reasoning_content is written back after the
#   last user message, as Qwen3's template does, and spliced there.
# In every case the prompt's ids spell the rendered text, and greedy output
# with the cache hit equals a cold run of the same ids. Needs curl and jq.
set -u
command -v curl >/dev/null && command -v jq >/dev/null || { echo "SKIP: needs curl and jq"; exit 77; }
. "$(dirname "$0")/../testutil.sh"
"$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 >/dev/null 2>&1 ||
  { echo "mkmodel failed"; exit 1; }
"$BIN" mkmodel -o "$TMP/q3.gguf" --arch qwen3 --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 >/dev/null 2>&1 ||
  { echo "mkmodel qwen3 failed"; exit 1; }
# ChatML that writes an assistant's reasoning_content back as the model generated it
printf '%s' "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n'}}{% if message.reasoning_content %}\
{{'<think>\\n' + message.reasoning_content + '\\n</think>\\n\\n'}}{% endif %}{{message['content'] + '<|im_end|>' + '\\n'}}\
{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}" >"$TMP/think.jinja"
KVT_SERVE_ARGS=(--host 127.0.0.1 -t 1 -c 1024)
U1="You are a careful assistant. Please tell me a long story about a cache that remembered every block it saw."
G=$(jq -Rn --arg g 'root ::= "<think>\nfirst plan the story, then tell it\n</think>\n\nonce upon a time a cache kept every block"' '$g')

# turn 1: a reply with reasoning, forced by a grammar; P1, C1 its token counts, R1 and A1 its two parts
turn1() {
  curl -s -m 20 -o "$TMP/body" "$URL/props"
  B=$(jb .block_size)
  post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"$U1\"}],\"grammar\":$G,\"max_tokens\":200}"
  R1=$(jb '.choices[0].message.reasoning_content'); A1=$(jb '.choices[0].message.content')
  P1=$(jb .usage.prompt_tokens); C1=$(jb .usage.completion_tokens)
  check "the reply's reasoning goes to reasoning_content" is "$R1" "first plan the story, then tell it"
  check "... and its answer to content" is "$A1" "once upon a time a cache kept every block"
}

# turn 2 with messages M (greedy); then the same ids cold (under a cache_salt of their own). CACHED: turn
# 2's cached tokens, WHY its rerendered_turn ({} for none), PROMPT its rendered text
COLD=0
turn2() {
  local m=$1 what=$2
  COLD=$((COLD + 1))
  post /v1/chat/completions "{\"messages\":$m,\"max_tokens\":16,\"temperature\":0,\"logprobs\":true}"
  CACHED=$(jb .usage.prompt_tokens_details.cached_tokens); local p2; p2=$(jb .usage.prompt_tokens)
  WHY=$(jb -c '.kvtier.rerendered_turn // {}')
  local text lp; text=$(jb '.choices[0].message.content'); lp=$(jb -c '[.choices[0].logprobs.content[].logprob]')
  post /apply-template "{\"messages\":$m}"
  PROMPT=$(jb .prompt); local ids; ids=$(jb -c .tokens)
  check "$what: /apply-template's ids are turn 2's prompt" is "$(jq length <<<"$ids")" "$p2"
  post /detokenize "{\"tokens\":$ids}"
  check "$what: the prompt's ids spell the rendered text" is "$(jb .content)" "$PROMPT"
  post /v1/completions "{\"prompt\":$ids,\"max_tokens\":16,\"temperature\":0,\"logprobs\":1,\"cache_salt\":\"cold$COLD\"}"
  check "$what: the cold run computes every prompt token" is "$(jb .usage.prompt_tokens_details.cached_tokens)" 0
  check "$what: greedy output with the cache hit equals the cold run's" is "$(jb .choices[0].text)" "$text"
  check "$what: ... logprob for logprob" is "$(jb -c .choices[0].logprobs.token_logprobs)" "$lp"
}

msgs() { # msgs WITH_REASONING: turn 2's messages, the reply sent back with or without reasoning_content
  if [ "$1" = 1 ]; then
    jq -cn --arg u "$U1" --arg r "$R1" --arg a "$A1" \
      '[{role:"user",content:$u},{role:"assistant",content:$a,reasoning_content:$r},{role:"user",content:"And then?"}]'
  else
    jq -cn --arg u "$U1" --arg a "$A1" '[{role:"user",content:$u},{role:"assistant",content:$a},{role:"user",content:"And then?"}]'
  fi
}

# ---- a template that renders reasoning_content: the reply is spliced back ----------------------------
kvt_start_server think -m "$TMP/m.gguf" --jinja --chat-template-file "$TMP/think.jinja"
turn1
turn2 "$(msgs 1)" "content + reasoning_content"
WANT=$(((P1 + C1 - 1) / B * B))
check "content + reasoning_content: turn 2 reuses turn 1's prompt and reply ($WANT tokens)" ge "$CACHED" "$WANT"
check "... and reports no re-rendered turn" is "$WHY" "{}"
check "... the reasoning is rendered" is "$(grep -c 'first plan' <<<"$PROMPT")" 1
# the same reply sent back as content alone: rendered without reasoning, so its ids cannot be used
turn2 "$(msgs 0)" "content alone"
check "content alone: the turn is reported as re-rendered without its reasoning" \
  is "$WHY" '{"message":1,"reason":"reasoning_dropped"}'
check "... everything before it is reused ($((P1 / B * B)) tokens)" ge "$CACHED" $((P1 / B * B))
kvt_stop_server think

# ---- Qwen3's template drops an earlier turn's reasoning: reuse stops exactly there ---------------------
kvt_start_server q3 -m "$TMP/q3.gguf" --jinja
turn1
for w in 0 1; do
  turn2 "$(msgs $w)" "qwen3, reasoning_content sent: $w"
  check "qwen3, reasoning_content sent: $w: the turn is reported as re-rendered without its reasoning" \
    is "$WHY" '{"message":1,"reason":"reasoning_dropped"}'
  check "... everything before it is reused ($((P1 / B * B)) tokens)" ge "$CACHED" $((P1 / B * B))
  check "... the reasoning is not rendered" is "$(grep -c 'first plan' <<<"$PROMPT")" 0
done
kvt_stop_server q3

# ---- the built-in qwen3 rendering keeps reasoning after the last user message (a tool loop's turns) ----
kvt_start_server q3b -m "$TMP/q3.gguf" --no-jinja
turn1
M=$(jq -cn --arg u "$U1" --arg r "$R1" --arg a "$A1" '[{role:"user",content:$u},{role:"assistant",content:$a,reasoning_content:$r}]')
turn2 "$M" "built-in qwen3, after the last user message"
check "built-in qwen3: the reply sent back with its reasoning is reused whole ($(((P1 + C1 - 1) / B * B)) tokens)" \
  ge "$CACHED" $(((P1 + C1 - 1) / B * B))
check "... its reasoning is rendered" is "$(grep -c 'first plan' <<<"$PROMPT")" 1
kvt_stop_server q3b

kvt_test_done test_server_think_reuse
