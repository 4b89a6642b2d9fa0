#!/usr/bin/env bash
# Prefix reuse across chat turns under the model's own Jinja template: a
# 3-turn chat that sends each reply back reuses turn 2's whole sequence (its
# prompt and reply) at turn 3, as the built-in rendering does, because a reply
# this server generated is spliced back as its exact ids wherever the
# template renders it unchanged. Greedy output with that cache hit equals a
# cold run of the same token sequence (/apply-template's ids as a completions
# prompt under another cache_salt: nothing cached, the same ids). A template
# that rewrites a reply (drops its reasoning) is rendered as the template
# does, and the answer's kvtier.rerendered_turn names that turn and why. The
# built-in rendering (--no-jinja) reports the same: nothing for replies and
# tool calls sent back as generated, an edited reply (unknown_reply), a
# changed call (tool_calls) and Qwen3's dropped reasoning (reasoning_dropped).
# Needs curl and jq.
set -u
command -v curl >/dev/null && command -v jq >/dev/null || { echo "SKIP: needs curl and jq"; exit 77; }
. "$(dirname "$0")/../testutil.sh"
# a real vocabulary, where generated ids are often not how their text re-tokenizes; else mkmodel's own
kvt_spm_model "$TMP/m.gguf"
# ChatML as models ship it (the SentencePiece vocabulary has no ChatML tokens: the markup is plain text)
printf '%s' "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + \
'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}" >"$TMP/chatml.jinja"
KVT_SERVE_ARGS=(--host 127.0.0.1 -t 1 -c 1024)
chat() { post /v1/chat/completions "{\"messages\":$1,\"max_tokens\":24,\"temperature\":0,\"logprobs\":true}"; }
U1="You are a careful assistant. Please tell me a long story about a cache that remembered every block it saw."

# three turns, each sending the previous reply back; CACHED gets each turn's cached_tokens, WANT2/WANT3
# what turns 2 and 3 must reuse (the previous turn's sequence: its prompt and all but its last sampled
# token, in whole blocks)
three_turns() {
  curl -s -m 20 -o "$TMP/body" "$URL/props"
  local b; b=$(jb .block_size)
  M1=$(jq -cn --arg u "$U1" '[{role:"user",content:$u}]')
  chat "$M1"; local r1 p1 c1 c2 p2 r2
  r1=$(jb '.choices[0].message.content'); p1=$(jb .usage.prompt_tokens); c1=$(jb .usage.completion_tokens)
  CACHED=$(jb .usage.prompt_tokens_details.cached_tokens)
  M2=$(jq -cn --argjson m "$M1" --arg r "$r1" '$m + [{role:"assistant",content:$r},{role:"user",content:"And then what happened next in that story?"}]')
  chat "$M2"; r2=$(jb '.choices[0].message.content'); p2=$(jb .usage.prompt_tokens); c2=$(jb .usage.completion_tokens)
  CACHED="$CACHED $(jb .usage.prompt_tokens_details.cached_tokens)"
  M3=$(jq -cn --argjson m "$M2" --arg r "$r2" '$m + [{role:"assistant",content:$r},{role:"user",content:"Finish it."}]')
  chat "$M3"; P3=$(jb .usage.prompt_tokens)
  CACHED="$CACHED $(jb .usage.prompt_tokens_details.cached_tokens)"
  WANT2=$(((p1 + c1 - 1) / b * b)); WANT3=$(((p2 + c2 - 1) / b * b))
}

kvt_start_server family -m "$TMP/m.gguf" --no-jinja
three_turns
echo "built-in rendering: cached_tokens per turn: $CACHED (turn 2 wants $WANT2, turn 3 $WANT3)"
check "built-in: turn 3, every reply sent back as generated, reports no re-rendered turn" \
  is "$(jb '.kvtier | has("rerendered_turn")')" false
# a reply the client edited is no reply of this server: tokenized from its text, and said so
ME=$(jq -c '.[1].content += " (edited)"' <<<"$M2")
chat "$ME"
check "built-in: an edited assistant reply is reported" is "$(jb -c .kvtier.rerendered_turn)" '{"message":1,"reason":"unknown_reply"}'
# a tool call this server generated, sent back as generated (spliced) and changed (reported)
TOOLS='[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
 "properties":{"city":{"type":"string","maxLength":12}},"required":["city"],"additionalProperties":false}}}]'
Q='{"role":"user","content":"What is the weather in Paris?"}'
post /v1/chat/completions "{\"messages\":[$Q],\"tools\":$TOOLS,\"tool_choice\":\"required\",\"max_tokens\":80}"
check "built-in: the forced call is made" is "$(jb .choices[0].finish_reason)" tool_calls
A1=$(jb -c .choices[0].message)
R="{\"role\":\"tool\",\"tool_call_id\":$(jq -c '.tool_calls[0].id' <<<"$A1"),\"content\":\"sunny\"}"
post /v1/chat/completions "{\"messages\":[$Q,$A1,$R],\"tools\":$TOOLS,\"tool_choice\":\"none\",\"max_tokens\":2}"
check "built-in: the call sent back as generated reports no re-rendered turn" \
  is "$(jb '.kvtier | has("rerendered_turn")')" false
A1X=$(jq -c '.tool_calls[0].function.arguments = "{\"city\": \"Oslo, Norway\"}"' <<<"$A1")
post /v1/chat/completions "{\"messages\":[$Q,$A1X,$R],\"tools\":$TOOLS,\"tool_choice\":\"none\",\"max_tokens\":2}"
check "built-in: a changed call is reported" is "$(jb -c .kvtier.rerendered_turn)" '{"message":1,"reason":"tool_calls"}'
kvt_stop_server family

kvt_start_server jinja -m "$TMP/m.gguf" --jinja --chat-template-file "$TMP/chatml.jinja"
three_turns
echo "--jinja: cached_tokens per turn: $CACHED (turn 2 wants $WANT2, turn 3 $WANT3)"
read -r _ C2 C3 <<<"$CACHED"
check "--jinja: turn 2 reuses turn 1's prompt and reply ($WANT2 tokens)" ge "$C2" "$WANT2"
check "--jinja: turn 3 reuses turn 2's prompt and reply ($WANT3 tokens)" ge "$C3" "$WANT3"
check "... and reports no re-rendered turn" is "$(jb '.kvtier | has("rerendered_turn")')" false
WARM_TEXT=$(jb '.choices[0].message.content')
WARM_LP=$(jb -c '[.choices[0].logprobs.content[].logprob]')
# cold: the same token ids, under a cache_salt nothing was cached for
post /apply-template "{\"messages\":$M3}"
IDS=$(jb -c .tokens)
check "/apply-template's ids are turn 3's prompt" is "$(jq length <<<"$IDS")" "$P3"
post /v1/completions "{\"prompt\":$IDS,\"max_tokens\":24,\"temperature\":0,\"logprobs\":1,\"cache_salt\":\"cold\"}"
check "the cold run computes every prompt token" is "$(jb .usage.prompt_tokens_details.cached_tokens)" 0
check "greedy output with the cache hit equals the cold run's" is "$(jb .choices[0].text)" "$WARM_TEXT"
check "... logprob for logprob" is "$(jb -c .choices[0].logprobs.token_logprobs)" "$WARM_LP"
# a client's own assistant text (never generated here) is tokenized from its text, and said so
post /v1/chat/completions '{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"written by hand"},{"role":"user","content":"b"}],"max_tokens":2}'
check "an assistant turn this server did not generate is reported" \
  is "$(jb -c .kvtier.rerendered_turn)" '{"message":1,"reason":"unknown_reply"}'
kvt_stop_server jinja

# ---- a template that rewrites a reply: rendered as the template does, and reported ----------------------
"$BIN" mkmodel -o "$TMP/q3.gguf" --arch qwen3 --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 >/dev/null 2>&1 ||
  { echo "mkmodel qwen3 failed"; exit 1; }
kvt_start_server q3 -m "$TMP/q3.gguf" --jinja --reasoning-format none
G=$(jq -Rn --arg g 'root ::= "<think>\nplan\n</think>\n\ndone"' '$g')
post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"grammar\":$G,\"max_tokens\":40}"
R=$(jb '.choices[0].message.content')
check "the reply keeps its reasoning (--reasoning-format none)" is "$R" $'<think>\nplan\n</think>\n\ndone'
M=$(jq -cn --arg r "$R" '[{role:"user",content:"q"},{role:"assistant",content:$r},{role:"user",content:"more"}]')
post /v1/chat/completions "{\"messages\":$M,\"max_tokens\":2}"
check "a reply whose reasoning the template drops is reported as such" is "$(jb -c .kvtier.rerendered_turn)" '{"message":1,"reason":"reasoning_dropped"}'
post /apply-template "{\"messages\":$M}"
check "... and rendered as the template does (without its reasoning)" \
  is "$(jb .prompt | grep -c 'plan')" 0
kvt_stop_server q3
# the built-in Qwen3 rendering drops earlier turns' reasoning too, and says so the same way
kvt_start_server q3b -m "$TMP/q3.gguf" --no-jinja --reasoning-format none
post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],\"grammar\":$G,\"max_tokens\":40}"
M=$(jq -cn --arg r "$(jb '.choices[0].message.content')" '[{role:"user",content:"q"},{role:"assistant",content:$r},{role:"user",content:"more"}]')
post /v1/chat/completions "{\"messages\":$M,\"max_tokens\":2}"
check "built-in: a reply whose reasoning the family drops is reported as such" \
  is "$(jb -c .kvtier.rerendered_turn)" '{"message":1,"reason":"reasoning_dropped"}'
kvt_stop_server q3b

kvt_test_done test_server_jinja_reuse
