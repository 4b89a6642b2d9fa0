#!/usr/bin/env bash
# The model's own Jinja chat template end to end over loopback: rendered by
# default (a template of no built-in family; with --no-jinja that stops the
# start naming --jinja), by /apply-template and chat; by default a template
# the interpreter cannot run falls back on its family, or stops the start
# naming the choices where it has none (and --jinja makes the fallback an
# error); --chat-template-file replaces the model's template (never through a
# symbolic link); chat_template_kwargs reach the template, are a 400 naming
# them under --no-jinja, except enable_thinking on the qwen3 family;
# <think>...</think> goes to reasoning_content, streamed or not (with tools
# too), also when the template opened the thought, and stays in content with
# --reasoning-format none or a request's reasoning_format "none". /props
# shows the template; kvtier.documents go before the last user message's
# text (where the template writes it, when it trims it or it is empty);
# --chat-template-kwargs are the default under a request's own. A
# template that does not parse or runs away stops the start; one that runs
# away on one request fails that request with a bounded error. The
# random-weight model's output is forced with a grammar. Needs curl, jq, python3.
set -u
command -v curl >/dev/null && command -v jq >/dev/null && command -v python3 >/dev/null ||
  { echo "SKIP: needs curl, jq and python3"; exit 77; }
HERE=${KVT_SRC:?KVT_SRC must point to the source tree}/tests
. "$(dirname "$0")/../testutil.sh"
has() { grep -q -- "$2" <<<"$1" || { echo "  '$1' lacks '$2'" >&2; return 1; }; }

"$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 >/dev/null 2>&1 ||
  { echo "mkmodel failed"; exit 1; }
ODD='{% for m in messages %}<<{{m.role}}>>{{m.content|trim}}{% endfor %}{% if enable_thinking is defined %}[t={{enable_thinking}}]{% endif %}{% if add_generation_prompt %}<<asst>>{% endif %}{{""-}}'
python3 "$HERE/gguf_poke.py" "$TMP/m.gguf" "$TMP/odd.gguf" str tokenizer.chat_template "$ODD" ||
  { echo "gguf_poke failed"; exit 1; }
KVT_SERVE_ARGS=(--host 127.0.0.1 -t 1 -c 1024)
MSG='"messages":[{"role":"user","content":"  hi  "}]'
THINK=$(jq -Rn --arg g 'root ::= "<think>\nplan it\n</think>\n\nfinal answer"' '$g')

# ---- --no-jinja: an odd template stops the start, naming --jinja ---------------------------------------
check "an unrecognised template stops the start under --no-jinja" expect_rc 1 "$BIN" serve -m "$TMP/odd.gguf" --no-jinja --port 0
check "... naming --jinja as a way out" grep -q -- 'with --jinja' "$TMP/out"
# by default a template the interpreter cannot run falls back on its family, or, of none, stops the start
printf '%s' '<|im_start|>{{ messages | no_such_filter }}' >"$TMP/chatml_bad.jinja"
printf '%s' '<<{{ messages | no_such_filter }}>>' >"$TMP/odd_bad.jinja"
kvt_start_server fallback -m "$TMP/m.gguf" --chat-template-file "$TMP/chatml_bad.jinja"
check "by default, a ChatML template the interpreter cannot run falls back on chatml" \
  grep -q 'use the built-in chatml rendering' "$TMP/fallback.log"
curl -s -m 20 -o "$TMP/body" "$URL/props"
check "... and /props says the template is not rendered (jinja false)" is "$(jb .jinja)" false
kvt_stop_server fallback
check "one of no family stops the start" \
  expect_rc 1 "$BIN" serve -m "$TMP/m.gguf" --chat-template-file "$TMP/odd_bad.jinja" --port 0
check "... naming the choices" grep -q -- '--chat-template-file FILE, or name the family.*--chat-template NAME' "$TMP/out"
check "with --jinja given, one of a family stops the start too" \
  expect_rc 1 "$BIN" serve -m "$TMP/m.gguf" --jinja --chat-template-file "$TMP/chatml_bad.jinja" --port 0
# a template that writes no message text (an empty file) would make every chat's prompt BOS alone
: >"$TMP/empty.jinja"
check "an empty template file stops the start" \
  expect_rc 1 "$BIN" serve -m "$TMP/m.gguf" --chat-template-file "$TMP/empty.jinja" --port 0
check "... saying it writes no message text" grep -q "does not write the messages' text" "$TMP/out"

# ---- the model's own template: the default where there is one (--jinja says so) ------------------------
kvt_start_server jinja -m "$TMP/odd.gguf"
post /apply-template "{$MSG}"
check "/apply-template renders the model's template" has "$(jb .prompt)" '<<user>>hi<<asst>>$'
post /apply-template "{$MSG,\"chat_template_kwargs\":{\"enable_thinking\":false}}"
check "chat_template_kwargs reach the template" has "$(jb .prompt)" '<<user>>hi\[t=False\]<<asst>>$'
post /v1/chat/completions "{$MSG,\"max_tokens\":3}"
check "chat answers with it" is "$CODE" 200
post /v1/chat/completions "{$MSG,\"grammar\":$THINK,\"max_tokens\":40}"
check "the thought goes to reasoning_content" is "$(jb .choices[0].message.reasoning_content)" "plan it"
check "... and the answer alone to content" is "$(jb .choices[0].message.content)" "final answer"
curl -s -m 60 -N -H 'Content-Type: application/json' \
  -d "{$MSG,\"grammar\":$THINK,\"max_tokens\":40,\"stream\":true}" "$URL/v1/chat/completions" >"$TMP/sse"
sed -n 's/^data: //p' "$TMP/sse" | grep -v '^\[DONE\]' >"$TMP/chunks"
check "streamed, the deltas' reasoning_content join to the thought" \
  is "$(jq -j '.choices[0].delta.reasoning_content // empty' "$TMP/chunks")" "plan it"
check "... and their content to the answer" is "$(jq -j '.choices[0].delta.content // empty' "$TMP/chunks")" "final answer"
post /v1/chat/completions "{$MSG,\"grammar\":$THINK,\"max_tokens\":40,\"reasoning_format\":\"none\"}"
check "reasoning_format none in the request keeps the thought in content" has "$(jb .choices[0].message.content)" '<think>'
post /v1/chat/completions "{$MSG,\"reasoning_format\":\"loud\"}"
check "an unknown reasoning_format is a 400 naming it" is "$CODE/$(jb .error.param)" 400/reasoning_format
curl -s -m 20 -o "$TMP/body" "$URL/props"
check "/props shows the template it renders" has "$(jb .chat_template)" 'enable_thinking is defined'
check "... and that it renders it (jinja)" is "$(jb .jinja)" true
DOC='"kvtier":{"documents":[{"id":"d","text":"the sky is green"}]}'
post /apply-template "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],$DOC}"
check "kvtier.documents under --jinja go before the last user message's text" \
  has "$(jb .prompt | tr -d '\n')" '<<user>>.*the sky is green.*hi<<asst>>$'
post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],$DOC,\"max_tokens\":2}"
check "... and chat answers with them" is "$CODE" 200
post /apply-template "{$MSG,$DOC}"
check "documents where the template changes the user's text (trim) go where it writes the content" \
  has "$(jb .prompt | tr -d '\n')" '<<user>>.*the sky is green.*hi<<asst>>$'
post /apply-template "{\"messages\":[{\"role\":\"user\",\"content\":\"\"}],$DOC}"
check "... and before an empty user message (rag prewarm sends one)" \
  has "$(jb .prompt | tr -d '\n')" '<<user>>.*the sky is green<<asst>>$'
post /apply-template "{\"messages\":[{\"role\":\"system\",\"content\":\"s\"}],$DOC}"
check "... and are a 400 naming them without a user message" is "$CODE/$(jb .error.param)" 400/kvtier.documents
kvt_stop_server jinja
kvt_start_server kw -m "$TMP/odd.gguf" --jinja --chat-template-kwargs '{"enable_thinking":true}'
post /apply-template "{$MSG}"
check "--chat-template-kwargs reach the template" has "$(jb .prompt)" '\[t=True\]<<asst>>$'
post /apply-template "{$MSG,\"chat_template_kwargs\":{\"enable_thinking\":false}}"
check "... under the request's own" has "$(jb .prompt)" '\[t=False\]<<asst>>$'
kvt_stop_server kw
check "--chat-template-kwargs that are not an object stop the start" \
  expect_rc 2 "$BIN" serve -m "$TMP/odd.gguf" --jinja --chat-template-kwargs '[1]' --port 0
check "... naming the flag" grep -q -- '--chat-template-kwargs' "$TMP/out"
check "--chat-template-kwargs without the Jinja rendering stops the start" \
  expect_rc 1 "$BIN" serve -m "$TMP/m.gguf" --no-jinja --chat-template-kwargs '{}' --port 0
check "... naming --jinja" grep -q -- '--jinja' "$TMP/out"

# ---- --reasoning-format none ----------------------------------------------------------------------------
kvt_start_server plain -m "$TMP/m.gguf" --no-jinja --reasoning-format none
post /v1/chat/completions "{$MSG,\"grammar\":$THINK,\"max_tokens\":40}"
check "--reasoning-format none leaves the thought in content" has "$(jb .choices[0].message.content)" '<think>'
check "... and gives no reasoning_content" is "$(jb '.choices[0].message | has("reasoning_content")')" false
post /v1/chat/completions "{$MSG,\"chat_template_kwargs\":{\"enable_thinking\":false}}"
check "chat_template_kwargs without --jinja is a 400 naming them" is "$CODE/$(jb .error.param)" 400/chat_template_kwargs
check "... saying --jinja would take them" has "$(jb .error.message)" '--jinja'
post /v1/chat/completions "{$MSG,\"chat_template_kwargs\":[1]}"
check "chat_template_kwargs that are not an object are a 400" is "$CODE/$(jb .error.param)" 400/chat_template_kwargs
check "an invalid --reasoning-format stops the start" expect_rc 2 "$BIN" serve -m "$TMP/m.gguf" --reasoning-format x
kvt_stop_server plain

# ---- the qwen3 family honours enable_thinking without --jinja ------------------------------------------
"$BIN" mkmodel -o "$TMP/q3.gguf" --arch qwen3 --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 >/dev/null 2>&1 ||
  { echo "mkmodel qwen3 failed"; exit 1; }
kvt_start_server q3 -m "$TMP/q3.gguf" --no-jinja
post /apply-template "{$MSG,\"chat_template_kwargs\":{\"enable_thinking\":false}}"
check "qwen3's enable_thinking false closes an empty thought" has "$(jb .prompt)" $'assistant\n<think>\n\n</think>\n\n$'
post /apply-template "{$MSG,\"chat_template_kwargs\":{\"other\":1}}"
check "... any other kwarg is a 400" is "$CODE/$(jb .error.param)" 400/chat_template_kwargs
kvt_stop_server q3

# ---- --chat-template-file -----------------------------------------------------------------------------------
printf '%s' '{{ bos_token }}{% for m in messages %}[{{ m.role | upper }}] {{ m.content }}
{% endfor %}{% if add_generation_prompt %}[ASSISTANT] <think>
{% endif %}' >"$TMP/open.jinja"
kvt_start_server file -m "$TMP/m.gguf" --jinja --chat-template-file "$TMP/open.jinja"
post /apply-template "{$MSG}"
check "--chat-template-file's template renders" has "$(jb .prompt)" $'\\[USER\\]   hi  \n\\[ASSISTANT\\] <think>\n$'
G2=$(jq -Rn --arg g 'root ::= "weighing\n</think>\nyes"' '$g')
post /v1/chat/completions "{$MSG,\"grammar\":$G2,\"max_tokens\":40}"
check "a thought the template opened goes to reasoning_content" is "$(jb .choices[0].message.reasoning_content)" weighing
check "... the rest to content" is "$(jb .choices[0].message.content)" yes
# with tools, streamed: the reply (all thought: the template opened it) goes to reasoning_content as unstreamed
TOOLS='"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"temperature":0,"max_tokens":12'
post /v1/chat/completions "{$MSG,$TOOLS}"
R=$(jb .choices[0].message.reasoning_content)
check "with tools, the opened thought goes to reasoning_content" gt "${#R}" 0
curl -s -m 60 -N -H 'Content-Type: application/json' -d "{$MSG,$TOOLS,\"stream\":true}" "$URL/v1/chat/completions" >"$TMP/sse"
sed -n 's/^data: //p' "$TMP/sse" | grep -v '^\[DONE\]' >"$TMP/chunks"
check "... streamed too: the deltas' reasoning_content join to it" \
  is "$(jq -j '.choices[0].delta.reasoning_content // empty' "$TMP/chunks")" "$R"
check "... and none of it streams as content" is "$(jq -j '.choices[0].delta.content // empty' "$TMP/chunks")" ""
kvt_stop_server file
ln -s "$TMP/open.jinja" "$TMP/link.jinja"
check "a symbolic link is not followed" expect_rc 1 "$BIN" serve -m "$TMP/m.gguf" --jinja --chat-template-file "$TMP/link.jinja" --port 0
check "... saying so" grep -q 'symbolic link' "$TMP/out"

# ---- bad and runaway templates -----------------------------------------------------------------------------
printf '%s' '{% for m in messages %}{{ m.content }}' >"$TMP/bad.jinja"
check "a template that does not parse stops the start" expect_rc 1 "$BIN" serve -m "$TMP/m.gguf" --jinja --chat-template-file "$TMP/bad.jinja" --port 0
check "... naming the line and what is missing" grep -q 'does not parse.*line 1.*endfor' "$TMP/out"
printf '%s' '{% set r = range(5000) %}{% for i in r %}{% for j in r %}{% endfor %}{% endfor %}' >"$TMP/spin.jinja"
check "a template that runs away stops the start" expect_rc 1 "$BIN" serve -m "$TMP/m.gguf" --jinja --chat-template-file "$TMP/spin.jinja" --port 0
check "... naming the step limit" grep -q 'more than [0-9]* steps' "$TMP/out"
printf '%s' '{% if messages | length > 1 %}{% set r = range(5000) %}{% for i in r %}{% for j in r %}{% endfor %}{% endfor %}{% endif %}{{ messages[0].content }}' >"$TMP/late.jinja"
kvt_start_server late -m "$TMP/m.gguf" --jinja --chat-template-file "$TMP/late.jinja"
post /v1/chat/completions '{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"}]}'
check "a request the template runs away on is a 400" is "$CODE/$(jb .error.param)" 400/messages
check "... naming the step limit" has "$(jb .error.message)" 'more than [0-9]* steps'
post /v1/chat/completions '{"messages":[{"role":"user","content":"a"}],"max_tokens":2}'
check "... and the server still answers" is "$CODE" 200
kvt_stop_server late

kvt_test_done test_server_jinja
