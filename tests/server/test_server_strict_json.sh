#!/usr/bin/env bash
# kvtier serve reads every request body as strict JSON, over loopback with a
# tiny generated model, sent as an attacker would: duplicate keys (top level,
# nested in a message, in a response_format schema, behind an escape), \u0000
# nested (schema enum, tool_choice name), raw control bytes, invalid and
# overlong UTF-8, encoded and unpaired surrogates, each on more than one
# route (generation, /v1/cache/*, /tokenize, /detokenize) -> 400 naming the
# place. Unknown top-level fields: ignored by default, a 400 naming them
# under --strict. Numeric field messages state the real constraint. Valid
# requests with escapes, emoji and nested objects still succeed.
# Needs curl and jq.
set -u
command -v curl >/dev/null && command -v jq >/dev/null || { echo "SKIP: needs curl and jq"; exit 77; }
. "$(dirname "$0")/../testutil.sh"

"$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 >/dev/null 2>&1 || { echo "mkmodel failed"; exit 1; }
KVT_SERVE_ARGS=(-m "$TMP/m.gguf" --host 127.0.0.1 -t 1 --ctx 256 --max-tokens-limit 64)

"$BIN" serve --help >"$TMP/help" 2>&1
check "serve --help explains --strict" grep -q -- '--strict.*refuse request fields' "$TMP/help"

# send PATH BYTES: POSTs BYTES (printf %b escapes such as \x01 expanded; JSON's own escapes written
# \\u0000) exactly as they are; the answer in $TMP/body, the status in $CODE
send() {
  printf '%b' "$2" >"$TMP/req"
  CODE=$(curl -s -m 60 -o "$TMP/body" -w '%{http_code}' -H 'Content-Type: application/json' \
    --data-binary @"$TMP/req" "$URL$1")
}
# says TEXT: the error message holds TEXT
says() { jb .error.message | grep -qF -- "$1" || { echo "  message '$(jb .error.message)' lacks '$1'" >&2; return 1; }; }
# refused DESC PATH BYTES CODE TEXT...: a 400 with that error code whose message holds each TEXT
refused() {
  local desc=$1 path=$2 bytes=$3 code=$4 t
  shift 4
  send "$path" "$bytes"
  check "$desc on $path: 400 $code" is "$CODE/$(jb .error.code)" "400/$code"
  for t in "$@"; do check "$desc on $path: message holds '$t'" says "$t"; done
}

kvt_start_server main

# ---- duplicate keys, at any depth: Python, JS and Go take the last copy, cJSON the first ----------
refused "duplicate max_tokens" /v1/completions '{"prompt":"x","max_tokens":5,"max_tokens":1}' duplicate_key \
  "duplicate key 'max_tokens'" "/max_tokens" "byte 29"
check "duplicate max_tokens: param names it" is "$(jb .error.param)" max_tokens
refused "duplicate behind an escape" /v1/completions '{"prompt":"x","max_tokens":5,"max_\\u0074okens":1}' \
  duplicate_key "/max_\\u0074okens"
refused "duplicate in messages[0]" /v1/chat/completions \
  '{"messages":[{"role":"user","content":"hi","content":"other"}],"max_tokens":1}' duplicate_key \
  "/messages/0/content"
SCHEMA_DUP='{"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"response_format":{"type":"json_schema",'
SCHEMA_DUP+='"json_schema":{"name":"v","schema":{"type":"string","enum":["yes"],"enum":["no"]}}}}'
refused "duplicate in a schema" /v1/chat/completions "$SCHEMA_DUP" duplicate_key \
  "/response_format/json_schema/schema/enum"
refused "duplicate in a prefill" /v1/cache/prefill '{"prompt":"x","kvtier":{"session_id":"a","session_id":"b"}}' \
  duplicate_key "/kvtier/session_id"
refused "duplicate pin_id" /v1/cache/unpin '{"pin_id":"a","pin_id":"b"}' duplicate_key "/pin_id"
refused "duplicate content" /tokenize '{"content":"a","content":"b"}' duplicate_key "/content"
refused "duplicate in a pin" /v1/cache/pin '{"messages":[{"role":"user","role":"system","content":"x"}]}' \
  duplicate_key "/messages/0/role"
refused "duplicate in a flush body" /v1/cache/flush '{"a":1,"a":2}' duplicate_key "/a"
refused "duplicate on the RAG route" /v1/rag/chat/completions '{"messages":[],"messages":[]}' duplicate_key "/messages"

# ---- \u0000 nested: a C string would end there ------------------------------------------------------
SCHEMA_NUL='{"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"response_format":{"type":"json_schema",'
SCHEMA_NUL+='"json_schema":{"name":"v","schema":{"type":"string","enum":["yes\\u0000no"]}}}}'
refused "u0000 in a schema enum" /v1/chat/completions "$SCHEMA_NUL" invalid_value \
  "/response_format/json_schema/schema/enum/0" '\u0000'
check "u0000 in a schema enum: param names the field" is "$(jb .error.param)" response_format
TOOL_NUL='{"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"tools":[{"type":"function","function":'
TOOL_NUL+='{"name":"f","parameters":{"type":"object"}}}],"tool_choice":{"type":"function","function":{"name":"f\\u0000zzz"}}}'
refused "u0000 in a tool_choice name" /v1/chat/completions "$TOOL_NUL" invalid_value "/tool_choice/function/name"
refused "u0000 in a key" /v1/completions '{"prompt":"x","us\\u0000er":"u"}' invalid_value '\u0000'
refused "u0000 in pin_id" /v1/cache/unpin '{"pin_id":"a\\u0000b"}' invalid_value "/pin_id"
refused "u0000 in content" /tokenize '{"content":"a\\u0000b"}' invalid_value "/content"
# a raw NUL byte inside a string: the same fault in that field's text (the HTTP layer's check, the only one)
refused "a raw NUL byte" /v1/completions '{"prompt":"a\x00b","max_tokens":1}' invalid_value "NUL byte" "/prompt"
check "a raw NUL byte: param names the field" is "$(jb .error.param)" prompt

# ---- raw control bytes, bad UTF-8, surrogates --------------------------------------------------------
refused "raw control byte" /v1/completions '{"prompt":"a\x01b","max_tokens":1}' invalid_json \
  "control byte 0x01" "/prompt" "byte 12"
refused "raw tab" /tokenize '{"content":"a\tb"}' invalid_json "control byte 0x09" "/content"
refused "raw control byte" /v1/cache/prefill '{"messages":[{"role":"user","content":"\x1f"}]}' invalid_json \
  "/messages/0/content"
refused "invalid UTF-8" /v1/chat/completions '{"messages":[{"role":"user","content":"a\xffb"}],"max_tokens":1}' \
  invalid_json "invalid UTF-8" "/messages/0/content"
refused "overlong UTF-8" /v1/completions '{"prompt":"\xc0\xaf","max_tokens":1}' invalid_json "overlong" "/prompt"
refused "overlong UTF-8" /v1/cache/unpin '{"session_id":"\xe0\x80\xaf"}' invalid_json "overlong" "/session_id"
refused "an encoded surrogate" /tokenize '{"content":"\xed\xa0\x80"}' invalid_json "surrogate"
refused "a code point above U+10FFFF" /detokenize '{"tokens":[1],"note":"\xf4\x90\x80\x80"}' invalid_json "U+10FFFF"
refused "an unpaired surrogate escape" /v1/completions '{"prompt":"\\ud800","max_tokens":1}' invalid_json \
  "unpaired surrogate" "/prompt"
refused "an unpaired surrogate escape" /v1/cache/unpin '{"pin_id":"\\udc00"}' invalid_json "unpaired surrogate"
refused "a number cJSON cannot read" /detokenize '{"tokens":[01]}' invalid_json "/tokens/0"
refused "an empty body" /v1/cache/unpin '' invalid_json "empty"

# ---- numeric messages: the real constraint, integers in full ---------------------------------------
send /v1/completions '{"prompt":"x","temperature":1e309}'
check "temperature 1e309: 400" is "$CODE/$(jb .error.param)" 400/temperature
check "temperature 1e309: says the constraint" says "'temperature' must be a finite number from 0 to 2"
send /v1/completions '{"prompt":"x","top_k":3000000000}'
check "top_k too large: 400" is "$CODE/$(jb .error.param)" 400/top_k
check "top_k too large: integer bounds in full" says "'top_k' must be an integer from -1 to 2147483647, got 3000000000"
check "top_k too large: no float notation" is "$(jb .error.message | grep -c 'e+')" 0
send /v1/completions '{"prompt":"x","top_p":0}'
check "top_p 0: says 0 is excluded" says "'top_p' must be a finite number above 0 and at most 1"

# ---- valid requests still pass ----------------------------------------------------------------------
OK_CHAT='{"messages":[{"role":"system","content":"caf\\u00e9 \\ud83d\\ude00 \"q\" \\\\ \/ tab\\t"},'
OK_CHAT+='{"role":"user","content":[{"type":"text","text":"h\xc3\xa9llo \xf0\x9f\x98\x80 \xe2\x82\xac"}]}],'
OK_CHAT+='"max_tokens":2,"stream_options":null,"kvtier":{"session_id":"s1","priority":3},"seed":1,"user":"u"}'
send /v1/chat/completions "$OK_CHAT"
check "chat with escapes, emoji and nested objects: 200" is "$CODE/$(jb .object)" 200/chat.completion
OK_SCHEMA='{"messages":[{"role":"user","content":"hi"}],"max_tokens":8,"response_format":{"type":"json_schema",'
OK_SCHEMA+='"json_schema":{"name":"v","schema":{"type":"object","properties":{"a":{"type":"object","properties":'
OK_SCHEMA+='{"b":{"enum":["\\u00e9"]}}}}}}}}'
send /v1/chat/completions "$OK_SCHEMA"
check "chat with a nested schema: 200" is "$CODE" 200
send /v1/completions '{"prompt":"\xe2\x82\xac \\ud83d\\ude00","max_tokens":1,"max_token":9}'
check "completion with an unknown field: ignored by default (200)" is "$CODE/$(jb .usage.completion_tokens)" 200/1
send /tokenize '{"content":"h\xc3\xa9 \\ud83d\\ude00","with_pieces":true}'
check "tokenize with unicode: 200" is "$CODE/$(jb '.tokens | length > 0')" 200/true
send /detokenize '{"tokens":[1,2,3]}'
check "detokenize: 200" is "$CODE" 200
PIN_PROMPT="{\"prompt\":\"$(for i in $(seq 10); do printf 'pin me \\\\u00e9 '; done)\"}"
send /v1/completions "${PIN_PROMPT%\}},\"max_tokens\":1}" # a pin holds what the cache holds already
send /v1/cache/pin "$PIN_PROMPT"
PIN=$(jb .pin_id)
check "pin: 200 with a pin_id" is "$CODE/$([ -n "$PIN" ] && [ "$PIN" != null ] && echo y)" 200/y
send /v1/cache/unpin "{\"pin_id\":\"$PIN\"}"
check "unpin: 200" is "$CODE/$(jb .released)" 200/true
CODE=$(curl -s -m 60 -o "$TMP/body" -w '%{http_code}' -X POST "$URL/v1/cache/flush")
check "flush without a body: still fine" is "$CODE" 200
kvt_stop_server main

# ---- --strict: unknown top-level fields are a 400 naming them -------------------------------------
kvt_start_server strict --strict
refused "a typo under --strict" /v1/completions '{"prompt":"x","max_token":1,"tempreature":0}' unknown_field \
  "'max_token'" "'tempreature'" "--strict"
refused "prompt on the chat route under --strict" /v1/chat/completions \
  '{"messages":[{"role":"user","content":"hi"}],"prompt":"x"}' unknown_field "'prompt'"
refused "an unknown unpin field under --strict" /v1/cache/unpin '{"pinid":"p"}' unknown_field "'pinid'"
refused "an unknown tokenize field under --strict" /tokenize '{"content":"x","add_bos":true}' unknown_field "'add_bos'"
refused "a flush body under --strict" /v1/cache/flush '{"all":true}' unknown_field "'all'"
send /v1/completions '{"prompt":"x","max_token":1,"max_tokens":1,"max_tokens":2}'
check "--strict: a broken body reports the break first" is "$CODE/$(jb .error.code)" 400/duplicate_key
# every field a parser reads, OpenAI's and llama-server's, is known
STRICT_OK='{"model":"m","prompt":"x","n_predict":1,"temperature":0,"top_p":1,"top_k":0,"min_p":0,"seed":2,'
STRICT_OK+='"repeat_penalty":1,"penalty_last_n":0,"presence_penalty":0,"frequency_penalty":0,"logit_bias":{},'
STRICT_OK+='"stop":["\\n"],"stream":false,"ignore_eos":false,"cache_salt":"t","cache_prompt":true,"user":"u",'
STRICT_OK+='"n":1,"logprobs":null,"echo":false,"kvtier":{"priority":1}}'
send /v1/completions "$STRICT_OK"
check "--strict: a completion with every kind of known field: 200" is "$CODE" 200
send /v1/chat/completions "$OK_CHAT"
check "--strict: the valid chat: 200" is "$CODE" 200
send /v1/cache/prefill '{"messages":[{"role":"user","content":"x"}],"cache_salt":"t"}'
check "--strict: prefill with messages: 200" is "$CODE" 200
send /tokenize '{"content":"x","add_special":true,"parse_special":false,"with_pieces":true}'
check "--strict: tokenize with its four fields: 200" is "$CODE" 200
kvt_stop_server strict

kvt_test_done test_server_strict_json
