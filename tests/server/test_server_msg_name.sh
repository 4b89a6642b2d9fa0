#!/usr/bin/env bash
# A message's "name" (OpenAI's participant name) over loopback: a Jinja
# chat template sees it as messages[i].name, as llama-server's --jinja passes
# it, so a template that writes it renders it, for every role; the built-in
# families render it as their official templates do, which is not at all, so
# a chat that differs only in names gives the same prompt there. Under the
# template, a 2-turn chat with names reuses turn 1's prompt and reply at turn
# 2 (the names render the same bytes on every turn), and greedy output with
# that cache hit equals a cold run of the same token ids. A name of another
# type than a string is a 400 naming it. Needs curl and jq.
set -u
command -v curl >/dev/null && command -v jq >/dev/null || { echo "SKIP: needs curl and jq"; exit 77; }
. "$(dirname "$0")/../testutil.sh"
has() { grep -qF -- "$2" <<<"$1" || { echo "  '$1' lacks '$2'" >&2; return 1; }; }

"$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 >/dev/null 2>&1 ||
  { echo "mkmodel failed"; exit 1; }
# ChatML with the name after the role, as some chat templates write it
printf '%s' "{% for m in messages %}{{ '<|im_start|>' + m['role'] }}{% if m.name %}{{ ' name=' + m.name }}\
{% endif %}{{ '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}\
{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}" >"$TMP/named.jinja"
KVT_SERVE_ARGS=(--host 127.0.0.1 -t 1 -c 1024)
U1="Alice here. Please tell me a long story about a cache that remembered every block it ever saw, twice."
M1=$(jq -cn --arg u "$U1" '[{role:"system",content:"Be kind.",name:"rules"},{role:"user",content:$u,name:"alice"}]')
chat() { post /v1/chat/completions "{\"messages\":$1,\"max_tokens\":16,\"temperature\":0,\"logprobs\":true}"; }

# ---- the built-in families: names are not rendered, as their official templates do -----------------------
for fam in chatml llama3 llama2 mistral qwen3 gemma phi3; do
  kvt_start_server "b_$fam" -m "$TMP/m.gguf" --no-jinja --chat-template "$fam"
  post /apply-template "{\"messages\":$M1}"
  with=$(jb -c .tokens)
  post /apply-template "{\"messages\":$(jq -c 'map(del(.name))' <<<"$M1")}"
  check "built-in $fam: names change nothing in the prompt" is "$with" "$(jb -c .tokens)"
  kvt_stop_server "b_$fam"
done

# ---- a Jinja template that writes names -------------------------------------------------------------------
kvt_start_server named -m "$TMP/m.gguf" --chat-template-file "$TMP/named.jinja"
post /apply-template "{\"messages\":$M1}"
P=$(jb .prompt)
check "the template renders the system message's name" has "$P" "<|im_start|>system name=rules"
check "... and the user's" has "$P" "<|im_start|>user name=alice"
post /apply-template "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\",\"name\":null}]}"
check "a null name is no name" has "$(jb .prompt)" $'<|im_start|>user\nhi'
post /apply-template "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\",\"name\":7}]}"
check "a name that is not a string is a 400 naming it" is "$CODE/$(jb .error.param)" "400/messages[0].name"

curl -s -m 20 -o "$TMP/body" "$URL/props"
B=$(jb .block_size)
chat "$M1"
R1=$(jb '.choices[0].message.content')
WANT2=$((($(jb .usage.prompt_tokens) + $(jb .usage.completion_tokens) - 1) / B * B))
M2=$(jq -cn --argjson m "$M1" --arg r "$R1" '$m + [{role:"assistant",content:$r},{role:"user",content:"And then?",name:"alice"}]')
chat "$M2"
check "turn 2 reuses turn 1's prompt and reply ($WANT2 tokens)" ge "$(jb .usage.prompt_tokens_details.cached_tokens)" "$WANT2"
check "... and reports no re-rendered turn" is "$(jb '.kvtier | has("rerendered_turn")')" false
WARM_TEXT=$(jb '.choices[0].message.content')
WARM_LP=$(jb -c '[.choices[0].logprobs.content[].logprob]')
# cold: the same token ids, under a cache_salt nothing was cached for
post /apply-template "{\"messages\":$M2}"
check "/apply-template writes turn 2's names" has "$(jb .prompt)" "<|im_start|>user name=alice"$'\n'"And then?"
post /v1/completions "{\"prompt\":$(jb -c .tokens),\"max_tokens\":16,\"temperature\":0,\"logprobs\":1,\"cache_salt\":\"cold\"}"
check "the cold run computes every prompt token" is "$(jb .usage.prompt_tokens_details.cached_tokens)" 0
check "greedy output with the cache hit equals the cold run's" is "$(jb .choices[0].text)" "$WARM_TEXT"
check "... logprob for logprob" is "$(jb -c .choices[0].logprobs.token_logprobs)" "$WARM_LP"
kvt_stop_server named

kvt_test_done test_server_msg_name
