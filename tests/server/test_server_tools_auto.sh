#!/usr/bin/env bash
# Tool calls under tool_choice auto over loopback, on a random-weight model
# under the Llama 3 template, whose call is a reply that opens with "{": a
# logit_bias on "{" makes the model open one of its own accord, and from
# there the lazy grammar holds it to the tools. Checks: the calls' arguments
# validate against the strict schema over many seeds, a non-strict tool's
# call is read, streamed calls equal the non-streamed ones, a strict tool
# whose schema kvtier cannot follow is a 400 naming tools while a non-strict
# one still works, free text without a call is the same as under
# tool_choice none, a greedy constrained reply is the same text cold and
# from the cache, and the next step of the agent reuses the call. Needs
# curl and jq.
set -u
command -v curl >/dev/null && command -v jq >/dev/null || { echo "SKIP: needs curl and jq"; exit 77; }
. "$(dirname "$0")/../testutil.sh"
has() { grep -q -- "$2" <<<"$1" || { echo "  '$1' lacks '$2'" >&2; return 1; }; }

"$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 >/dev/null 2>&1 || { echo "mkmodel failed"; exit 1; }
KVT_SERVE_ARGS=(-m "$TMP/m.gguf" -t 1 -c 2048)
kvt_start_server llama3 --chat-template llama3

post /tokenize '{"content":"{"}'
BRACE=$(jb '.tokens[0]')
check "'{' is one token" is "$(jb '.tokens | length')" 1
BIAS="\"logit_bias\":{\"$BRACE\":100}"
TOOLS='[{"type":"function","function":{"name":"get_weather","strict":true,"parameters":{"type":"object",
 "properties":{"city":{"type":"string","maxLength":12},"unit":{"enum":["c","f"]}},"required":["city","unit"],
 "additionalProperties":false}}},
 {"type":"function","function":{"name":"add","parameters":{"type":"object","properties":{"a":{"type":"integer"},
 "b":{"type":"integer"}},"required":["a","b"],"additionalProperties":false}}}]'
ARGS_OK='(.function.name=="get_weather" and (.function.arguments|fromjson|(.city|type=="string" and (explode|length)<=12)
 and (.unit=="c" or .unit=="f") and (keys|length==2))) or (.function.name=="add" and (.function.arguments|fromjson|
 (.a|type=="number" and .==floor) and (.b|type=="number" and .==floor) and (keys|length==2)))'
Q='"messages":[{"role":"user","content":"What is the weather in Paris?"}]'

good=0 names=""
for seed in $(seq 1 10); do
  post /v1/chat/completions "{$Q,\"tools\":$TOOLS,$BIAS,\"max_tokens\":150,\"seed\":$seed}"
  [ "$(jb "(.choices[0].finish_reason==\"tool_calls\") and (.choices[0].message.tool_calls|length==1) and (.choices[0].message.tool_calls[0]|$ARGS_OK)" 2>/dev/null)" = true ] && good=$((good + 1))
  names="$names $(jb '.choices[0].message.tool_calls[0].function.name' 2>/dev/null)"
done
check "auto: 10 of 10 seeds write a call whose arguments validate" is "$good" 10
check "... the non-strict tool's among them" has "$names" add
# the strict tool alone (this model picks add where it may): a string bounded in length and an enum
WEATHER=$(jq -c '[.[0]]' <<<"$TOOLS")
good=0
for seed in $(seq 1 6); do
  post /v1/chat/completions "{$Q,\"tools\":$WEATHER,$BIAS,\"max_tokens\":150,\"seed\":$seed}"
  [ "$(jb "(.choices[0].finish_reason==\"tool_calls\") and (.choices[0].message.tool_calls[0]|.function.name==\"get_weather\" and ($ARGS_OK))" 2>/dev/null)" = true ] && good=$((good + 1))
done
check "auto, the strict tool: 6 of 6 seeds write arguments that validate" is "$good" 6

# streamed: the fragments join to the same call
REQ="{$Q,\"tools\":$TOOLS,$BIAS,\"max_tokens\":150,\"seed\":3"
post /v1/chat/completions "$REQ}"
NS=$(jb -c '[.choices[0].message.tool_calls[0].function | .name, .arguments]')
curl -s -m 120 -N -H 'Content-Type: application/json' -d "$REQ,\"stream\":true}" "$URL/v1/chat/completions" >"$TMP/sse"
ST=$(grep '^data: {' "$TMP/sse" | sed 's/^data: //' | jq -sc '[.[].choices[0].delta.tool_calls // [] | .[] | select(.index==0) | .function] | [(map(.name // "") | add), (map(.arguments // "") | add)]')
check "a streamed call under auto reassembles to the non-streamed one" is "$ST" "$NS"
check "... and finishes with tool_calls" is "$(grep -c '"finish_reason":"tool_calls"' "$TMP/sse")" 1

# a schema kvtier cannot follow: strict is refused by name, non-strict still answers with its call
HOST='{"type":"object","properties":{"h":{"type":"string","format":"hostname"}}}'
post /v1/chat/completions "{$Q,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"strict\":true,\"parameters\":$HOST}}],$BIAS,\"max_tokens\":60}"
check "a strict tool whose schema kvtier cannot follow is a 400 naming tools" is "$CODE/$(jb .error.param)" 400/tools
check "... naming the keyword" has "$(jb .error.message)" "'format' \"hostname\""
post /v1/chat/completions "{$Q,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":$HOST}}],$BIAS,\"max_tokens\":80,\"seed\":2}"
check "the same tool not strict: 200" is "$CODE" 200
check "... its call is read, arguments a JSON object" is "$(jb '.choices[0].message.tool_calls[0] | (.function.name=="f") and (.function.arguments|fromjson|type=="object")')" true
post /v1/chat/completions "{$Q,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"strict\":\"yes\"}}]}"
check "strict that is not a boolean is a 400 naming it" is "$CODE/$(jb .error.param)" 400/tools[0].function.strict

# no call: the free text is the model's own, the same as with tool_choice none (greedy)
post /v1/chat/completions "{$Q,\"tools\":$TOOLS,\"max_tokens\":24,\"temperature\":0,\"tool_choice\":\"none\"}"
NONE=$(jb '.choices[0].message.content')
post /v1/chat/completions "{$Q,\"tools\":$TOOLS,\"max_tokens\":24,\"temperature\":0}"
check "without a call, auto writes what none writes" is "$(jb '.choices[0].message.content')" "$NONE"
check "... and it is text, not a call" is "$(jb '.choices[0].message.tool_calls')" null

# greedy constrained reply: cold and from the cache, the same text
LONG="\"messages\":[{\"role\":\"system\",\"content\":\"$(printf 'You call tools when a tool can answer. %.0s' $(seq 8))\"},{\"role\":\"user\",\"content\":\"Weather in Oslo?\"}]"
GREEDY="{$LONG,\"tools\":$TOOLS,$BIAS,\"max_tokens\":150,\"temperature\":0}"
post /v1/chat/completions "$GREEDY"
COLD=$(jb -c '.choices[0].message.tool_calls | map(.function)')
check "greedy auto call is a call" is "$(jb '.choices[0].finish_reason')" tool_calls
post /v1/chat/completions "$GREEDY"
check "the repeat is a cache hit" ge "$(jb .usage.prompt_tokens_details.cached_tokens)" 64
check "... with the same constrained call" is "$(jb -c '.choices[0].message.tool_calls | map(.function)')" "$COLD"

# the agent's next step reuses the prompt and the call the model chose
post /v1/chat/completions "{$Q,\"tools\":$TOOLS,$BIAS,\"max_tokens\":150,\"seed\":5}"
P1=$(jb .usage.prompt_tokens) C1=$(jb .usage.completion_tokens) A1=$(jb -c '.choices[0].message')
ID1=$(jb '.choices[0].message.tool_calls[0].id')
post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"What is the weather in Paris?\"},$A1,{\"role\":\"tool\",\"tool_call_id\":\"$ID1\",\"content\":\"sunny\"}],\"tools\":$TOOLS,\"max_tokens\":4}"
check "the next step is accepted" is "$CODE" 200
check "... and reuses the prompt and the call" ge "$(jb .usage.prompt_tokens_details.cached_tokens)" $(( (P1 + C1 - 1) / 32 * 32 ))
kvt_stop_server llama3

kvt_test_done test_server_tools_auto
