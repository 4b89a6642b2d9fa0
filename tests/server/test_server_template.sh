#!/usr/bin/env bash
# The chat template a command renders with is never a silent guess: a GGUF
# whose tokenizer.chat_template kvtier does not recognise is rendered by
# serve's Jinja interpreter by default, and stops serve --no-jinja (and lint,
# and rag's prompt) with an error naming --chat-template and its choices;
# --chat-template NAME starts it; a GGUF without a template keeps the
# documented default, ChatML. Needs curl, jq and python3.
set -u
command -v curl >/dev/null && command -v jq >/dev/null || { echo "SKIP: needs curl and jq"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: needs python3 for tests/gguf_poke.py"; exit 77; }
HERE=${KVT_SRC:?KVT_SRC must point to the source tree}/tests
. "$(dirname "$0")/../testutil.sh"

"$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 >/dev/null 2>&1 ||
  { echo "mkmodel failed"; exit 1; }
# the same model with a template of no known family, and with none at all (the key renamed)
python3 "$HERE/gguf_poke.py" "$TMP/m.gguf" "$TMP/unknown.gguf" str tokenizer.chat_template \
  '{% for m in messages %}<<{{ m.role }}>>{{ m.content }}{% endfor %}' || { echo "gguf_poke failed"; exit 1; }
python3 "$HERE/gguf_poke.py" "$TMP/m.gguf" "$TMP/none.gguf" key tokenizer.chat_template tokenizer.chat_templatX ||
  { echo "gguf_poke failed"; exit 1; }
KVT_SERVE_ARGS=(--host 127.0.0.1 -t 1)

check "the model with the odd template has one, of no known family" \
  bash -c "'$BIN' info -m '$TMP/unknown.gguf' | grep -q 'chat template *unknown'"

# ---- an unknown template is rendered as itself by default -----------------------------------------
kvt_start_server odd -m "$TMP/unknown.gguf"
curl -s -m 20 -o "$TMP/body" -H 'Content-Type: application/json' -d '{"messages":[{"role":"user","content":"hi"}]}' \
  "$URL/apply-template"
check "by default serve renders a template it does not recognise with its interpreter" \
  is "$(jb '.prompt | sub(" +$"; "")')" '<|endoftext|><<user>>hi'
kvt_stop_server odd

# ---- --no-jinja: an unknown template stops the start, naming the way out -------------------------
check "serve --no-jinja refuses a model whose template it does not recognise" \
  expect_rc 1 "$BIN" serve -m "$TMP/unknown.gguf" --no-jinja --port 0
check "... naming tokenizer.chat_template" grep -q 'tokenizer.chat_template is not one kvtier recognises' "$TMP/out"
check "... and --chat-template NAME with every name" \
  grep -q -- 'chat-template NAME (chatml, llama3, llama2, mistral, qwen3, gemma or phi3)' "$TMP/out"
check "... and --jinja, which renders the template itself" grep -q -- 'with --jinja' "$TMP/out"
check "... before it listens" bash -c "! grep -q 'listening on' '$TMP/out'"

printf '{"messages": [{"role": "user", "content": "hi"}]}\n' >"$TMP/p.jsonl"
check "lint refuses it the same way" expect_rc 1 "$BIN" lint -m "$TMP/unknown.gguf" "$TMP/p.jsonl"
check "... naming --chat-template" grep -q -- '--chat-template NAME' "$TMP/out"
check "... and not --jinja, which lint does not have" bash -c "! grep -q -- '--jinja' '$TMP/out'"
check "lint takes it with --chat-template" expect_rc 0 "$BIN" lint -m "$TMP/unknown.gguf" --chat-template llama3 \
  "$TMP/p.jsonl"

# ---- --chat-template names the family: the server starts and renders with it ---------------------
kvt_start_server named -m "$TMP/unknown.gguf" --chat-template llama3
check "with --chat-template it starts, with that family" grep -q '(llama3 chat template)' "${KVT_LOG[named]}"
check "/props says which family renders" is "$(curl -s -m 10 "$URL/props" | jq -r .chat_template_family)" llama3
post /v1/chat/completions '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}'
check "and chat answers" is "$CODE" 200
kvt_stop_server named

# ---- no template at all: the documented default, ChatML, with a warning -----------------------------
kvt_start_server none -m "$TMP/none.gguf"
check "a model without a template starts with chatml" grep -q '(chatml chat template)' "${KVT_LOG[none]}"
check "... saying so" grep -q 'has no chat template; using chatml' "${KVT_LOG[none]}"
post /v1/chat/completions '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}'
check "... and chat answers" is "$CODE" 200
kvt_stop_server none

kvt_test_done test_server_template
