#!/usr/bin/env bash
# Structured output and tool calling end to end over loopback, on a
# random-weight model (which writes noise unconstrained, so every valid
# document below is the grammar's doing): response_format json_object and
# json_schema over many seeds, unsupported schema features refused by name,
# greedy constrained output bit-identical with a cache hit and cold, forced
# and named tool calls whose arguments follow the schema, streamed calls equal
# to non-streamed ones, an agent loop whose next step reuses the tool block
# and the generated call from the cache, and the Llama 3 and Mistral call
# styles. Needs
# curl and jq.
set -u
command -v curl >/dev/null && command -v jq >/dev/null || { echo "SKIP: needs curl and jq"; exit 77; }
. "$(dirname "$0")/../testutil.sh"
has() { grep -q -- "$2" <<<"$1" || { echo "  '$1' lacks '$2'" >&2; return 1; }; }

"$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 >/dev/null 2>&1 || { echo "mkmodel failed"; exit 1; }

KVT_SERVE_ARGS=(-m "$TMP/m.gguf" -t 1 -c 2048)

MSG='"messages":[{"role":"user","content":"Answer in JSON."}]'
SCHEMA='{"type":"object","properties":{"name":{"type":"string","maxLength":12},"age":{"type":"integer"},
 "tags":{"type":"array","items":{"enum":["a","b",3]},"maxItems":3},"ok":{"type":["boolean","null"]}},
 "required":["name","age","tags"],"additionalProperties":false}'
# jq: 1 when the content is a document of SCHEMA
VALID='(.name|type=="string" and (explode|length)<=12) and (.age|type=="number" and .==floor) and (.tags|type=="array"
 and length<=3 and all(.[]; .=="a" or .=="b" or .==3)) and ((.ok|type) as $t | $t=="boolean" or $t=="null")
 and (keys - ["name","age","tags","ok"] | length==0)'

kvt_start_server main -np 2
# ---- response_format ------------------------------------------------------------------------------
good=0
for seed in $(seq 1 12); do
  post /v1/chat/completions "{$MSG,\"response_format\":{\"type\":\"json_object\"},\"max_tokens\":120,\"seed\":$seed}"
  [ "$CODE" = 200 ] && jb '.choices[0].message.content | fromjson | type' 2>/dev/null | grep -qx object && good=$((good + 1))
done
check "json_object: 12 of 12 seeds give a JSON object" is "$good" 12
good=0
for seed in $(seq 1 12); do
  post /v1/chat/completions "{$MSG,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"p\",\"strict\":true,\"schema\":$SCHEMA}},\"max_tokens\":150,\"seed\":$seed}"
  [ "$CODE" = 200 ] && [ "$(jb ".choices[0].message.content | fromjson | $VALID" 2>/dev/null)" = true ] && good=$((good + 1))
done
check "json_schema: 12 of 12 seeds validate" is "$good" 12
check "... and stop when the document is complete" is "$(jb '.choices[0].finish_reason')" stop
post /v1/completions "{\"prompt\":\"JSON:\",\"json_schema\":$SCHEMA,\"max_tokens\":150,\"seed\":5}"
check "completions with llama.cpp's json_schema validate" is "$(jb ".choices[0].text | fromjson | $VALID")" true
post /v1/chat/completions "{$MSG,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"object\",\"properties\":{\"zip\":{\"type\":\"string\",\"pattern\":\"^(?=1)[0-9]+$\"}}}}}}"
check "an unsupported pattern feature is a 400 naming response_format" is "$CODE/$(jb .error.param)" 400/response_format
check "... and the feature and where it is" has "$(jb .error.message)" "lookaround or flags) in 'pattern' (at offset 1) at /properties/zip"
post /v1/chat/completions "{$MSG,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{}}}"
check "json_schema without a schema is a 400" is "$CODE" 400

# greedy constrained output: a cache hit gives the same bytes as a cold run
LONG="\"messages\":[{\"role\":\"system\",\"content\":\"$(printf 'You reply with one JSON record about a person. %.0s' $(seq 8))\"},{\"role\":\"user\",\"content\":\"Ada\"}]"
GREEDY="{$LONG,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":$SCHEMA}},\"max_tokens\":150,\"temperature\":0}"
post /v1/chat/completions "$GREEDY"
COLD=$(jb '.choices[0].message.content')
post /v1/chat/completions "$GREEDY"
check "the repeat is a cache hit" ge "$(jb .usage.prompt_tokens_details.cached_tokens)" 64
check "... with the same constrained text" is "$(jb '.choices[0].message.content')" "$COLD"

# ---- tools ------------------------------------------------------------------------------------------
TOOLS='[{"type":"function","function":{"name":"get_weather","description":"The weather in a city",
 "parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":16},"unit":{"enum":["c","f"]}},
 "required":["city","unit"],"additionalProperties":false}}},
 {"type":"function","function":{"name":"add","description":"Adds two numbers","parameters":{"type":"object",
 "properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"],"additionalProperties":false}}}]'
ARGS_OK='(.function.name=="get_weather" and (.function.arguments|fromjson|(.city|type=="string") and (.unit=="c" or .unit=="f")
 and (keys|length==2))) or (.function.name=="add" and (.function.arguments|fromjson|(.a|type=="number") and (.b|type=="number") and (keys|length==2)))'
good=0 bare=0
for seed in $(seq 1 8); do
  post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"What is the weather in Paris?\"}],\"tools\":$TOOLS,\"tool_choice\":\"required\",\"max_tokens\":120,\"seed\":$seed}"
  [ "$(jb "(.choices[0].finish_reason==\"tool_calls\") and (.choices[0].message.content==null) and (.choices[0].message.tool_calls|length==1) and (.choices[0].message.tool_calls[0]|$ARGS_OK)" 2>/dev/null)" = true ] && good=$((good + 1))
  [ "$(jb '.choices[0].message.tool_calls[0].function.arguments | (startswith("{") and endswith("}"))' 2>/dev/null)" = true ] && bare=$((bare + 1))
done
check "tool_choice required: 8 of 8 seeds call a tool with valid arguments" is "$good" 8
check "... arguments that begin with { and end with }, no whitespace around (8 of 8)" is "$bare" 8
post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"2+3?\"}],\"tools\":$TOOLS,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"add\"}},\"max_tokens\":120,\"seed\":4}"
check "a named function is the one called" is "$(jb '.choices[0].message.tool_calls[0].function.name')" add
check "... with valid arguments" is "$(jb ".choices[0].message.tool_calls[0] | $ARGS_OK")" true
check "... and an id" has "$(jb '.choices[0].message.tool_calls[0].id')" call_
NS=$(jb -c '[.choices[0].message.tool_calls[0].function | .name, .arguments]')
curl -s -m 120 -N -H 'Content-Type: application/json' -d "{\"messages\":[{\"role\":\"user\",\"content\":\"2+3?\"}],\"tools\":$TOOLS,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"add\"}},\"max_tokens\":120,\"seed\":4,\"stream\":true}" "$URL/v1/chat/completions" >"$TMP/sse"
ST=$(grep '^data: {' "$TMP/sse" | sed 's/^data: //' | jq -sc '[.[].choices[0].delta.tool_calls // [] | .[] | select(.index==0) | .function] | [(map(.name // "") | add), (map(.arguments // "") | add)]')
check "a streamed call reassembles to the non-streamed one" is "$ST" "$NS"
check "... and finishes with tool_calls" is "$(grep -c '"finish_reason":"tool_calls"' "$TMP/sse")" 1
# cut_sweep STYLE MARK: a named call that max_tokens cuts, at 10 budgets, on the last server started:
# finish_reason length, the call as far as it got (its name once whole: in about the last four, as the
# opening and the name take some 40 tokens here), never the call markup MARK as content; the stream
# says the same. (From about 56 tokens on the grammar closes the call within the budget.)
cut_sweep() {
  local style=$1 mark=$2 leak=0 named=0 len=0 same=0 calls=0 mt REQ NSC STC
  for mt in 2 8 14 20 28 36 42 46 50 54; do
    REQ="{\"messages\":[{\"role\":\"user\",\"content\":\"2+3?\"}],\"tools\":$TOOLS,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"add\"}},\"max_tokens\":$mt,\"seed\":4"
    post /v1/chat/completions "$REQ}"
    [ "$(jb '.choices[0].finish_reason')" = length ] && len=$((len + 1))
    jb '.choices[0].message.content // ""' | grep -qF "$mark" && leak=$((leak + 1))
    [ "$(jb '[.choices[0].message.tool_calls // [] | .[] | .function.name == "add"] | all')" = true ] && named=$((named + 1))
    [ "$(jb '.choices[0].message.tool_calls | length')" = 1 ] && calls=$((calls + 1))
    NSC=$(jb -c '[.choices[0].message.content // "", (.choices[0].message.tool_calls // [] | map(.function.arguments))]')
    curl -s -m 120 -N -H 'Content-Type: application/json' -d "$REQ,\"stream\":true}" "$URL/v1/chat/completions" >"$TMP/sse"
    STC=$(grep '^data: {' "$TMP/sse" | sed 's/^data: //' | jq -sc '[(map(.choices[0].delta.content // "") | add),
      ([.[].choices[0].delta.tool_calls // [] | .[]] | group_by(.index) | map(map(.function.arguments // "") | add))]')
    [ "$STC" = "$NSC" ] && grep -q '"finish_reason":"length"' "$TMP/sse" && same=$((same + 1))
  done
  check "$style: a call cut by max_tokens finishes with length (10 of 10)" is "$len" 10
  check "$style: ... never returns the call markup as content" is "$leak" 0
  check "$style: ... names the function it was writing" is "$named" 10
  check "$style: ... and returns that call once its name is written" ge "$calls" 3
  check "$style: ... and streams the same content and arguments (10 of 10)" is "$same" 10
}
cut_sweep chatml '<tool_call'
post /v1/chat/completions "{$MSG,\"tools\":$TOOLS,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}}"
check "naming a function not in tools is a 400 naming tool_choice" is "$CODE/$(jb .error.param)" 400/tool_choice
post /v1/chat/completions "{$MSG,\"tools\":$TOOLS,\"response_format\":{\"type\":\"json_object\"}}"
check "JSON output with callable tools is a 400 naming response_format" is "$CODE/$(jb .error.param)" 400/response_format
post /v1/chat/completions "{$MSG,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"string\",\"format\":\"hostname\"}}}}}],\"tool_choice\":\"required\"}"
check "a forced call over an unsupported schema is a 400 naming tools" is "$CODE/$(jb .error.param)" 400/tools
check "... and the keyword" has "$(jb .error.message)" "'format' \"hostname\""
post /v1/chat/completions "{$MSG,\"tools\":$TOOLS,\"tool_choice\":\"none\",\"max_tokens\":4}"
check "tool_choice none: a plain reply" is "$CODE/$(jb '.choices[0].message.tool_calls')" 200/null

# an agent loop: forced call, tool result, next step; each step reuses the tool block and the call itself
Q='{"role":"user","content":"What is the weather in Paris, and then add 2 and 3?"}'
post /v1/chat/completions "{\"messages\":[$Q],\"tools\":$TOOLS,\"tool_choice\":\"required\",\"max_tokens\":80,\"seed\":9,\"parallel_tool_calls\":false}"
P1=$(jb .usage.prompt_tokens) C1=$(jb .usage.completion_tokens)
A1=$(jb -c '.choices[0].message')
ID1=$(jb '.choices[0].message.tool_calls[0].id')
check "step 1 called a tool" is "$(jb '.choices[0].finish_reason')" tool_calls
STEP2="[$Q,$A1,{\"role\":\"tool\",\"tool_call_id\":\"$ID1\",\"content\":\"sunny, 21 C\"}]"
post /v1/chat/completions "{\"messages\":$STEP2,\"tools\":$TOOLS,\"tool_choice\":\"required\",\"max_tokens\":80,\"seed\":10}"
check "step 2 (tool result) is accepted" is "$CODE" 200
CACHED2=$(jb .usage.prompt_tokens_details.cached_tokens)
# everything step 1 saw and wrote, but its last partial block, comes from the cache: the call was spliced back as its
# ids (the last token it wrote was never fed, so its KV, and a block it would complete, do not exist)
check "step 2 reuses step 1's prompt and call" ge "$CACHED2" $(( (P1 + C1 - 1) / 32 * 32 ))
A2=$(jb -c '.choices[0].message')
ID2=$(jb '.choices[0].message.tool_calls[0].id')
post /v1/chat/completions "{\"messages\":${STEP2%]},$A2,{\"role\":\"tool\",\"tool_call_id\":\"$ID2\",\"content\":\"5\"}],\"tools\":$TOOLS,\"max_tokens\":8,\"seed\":11}"
check "step 3 (auto, free text) is accepted" is "$CODE" 200
check "step 3's cache grows" ge "$(jb .usage.prompt_tokens_details.cached_tokens)" $((CACHED2 + 32))
post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"x\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"x\",\"content\":\"1\"}],\"max_tokens\":2}"
check "tool turns without tools render (200)" is "$CODE" 200
kvt_stop_server main

# ---- n > 1: one prefill, n sequences on the prompt's pages, each its own sampler -------------------
kvt_start_server choices -np 4
metric() { curl -s "$URL/metrics" | awk -v k="$1" '$1 == k {print $2}'; }
NP='"prompt":"Once upon a time, in a cache far away, there lived a block of thirty-two tokens and its parent.","ignore_eos":true'
post /v1/completions "{$NP,\"max_tokens\":6,\"temperature\":0}"
ONE=$(jb '.choices[0].text') PT=$(jb .usage.prompt_tokens)
C0=$(metric kvtier_computed_tokens_total) P0=$(metric kvtier_prompt_tokens_total)
post /v1/completions "{$NP,\"max_tokens\":6,\"temperature\":0,\"n\":3,\"cache_salt\":\"fresh\"}"
check "n=3: three choices, indexed 0..2" is "$(jb -c '[.choices[].index]')" "[0,1,2]"
check "... greedy: all equal the single run" is "$(jb -c '[.choices[].text] | unique')" "$(jq -nc --arg t "$ONE" '[$t]')"
check "... usage: the prompt once, 3 x 6 generated" is "$(jb -c '[.usage.prompt_tokens, .usage.completion_tokens]')" "[$PT,18]"
# a fresh salt, so nothing was cached: the prompt was prefilled once for the three
check "... the prompt was computed once" is "$(( $(metric kvtier_computed_tokens_total) - C0 ))" "$PT"
check "... and counted once" is "$(( $(metric kvtier_prompt_tokens_total) - P0 ))" "$PT"
post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":8,\"seed\":40,\"n\":3,\"ignore_eos\":true}"
MANY=$(jb -c '[.choices[].message.content]')
SINGLES=$(for i in 0 1 2; do
  post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":8,\"seed\":$((40 + i)),\"ignore_eos\":true}"
  jb '.choices[0].message.content'; done | jq -Rsc 'split("\n")[:-1]')
check "seeded n=3: choice i equals a single run with seed + i" is "$MANY" "$SINGLES"
check "... and they differ" is "$(jq 'unique | length' <<<"$MANY")" 3
curl -s -m 60 -N -H 'Content-Type: application/json' -d "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":8,\"seed\":40,\"n\":3,\"ignore_eos\":true,\"stream\":true,\"stream_options\":{\"include_usage\":true}}" "$URL/v1/chat/completions" >"$TMP/sse"
ST=$(grep '^data: {' "$TMP/sse" | sed 's/^data: //' | jq -sc '[.[] | .choices[]? | {i: .index, c: (.delta.content // "")}] | group_by(.i) | map(map(.c) | add)')
check "streamed n=3 reassembles per index" is "$ST" "$MANY"
check "... three finish chunks and one usage chunk" is "$(grep -c '"finish_reason":"length"' "$TMP/sse")/$(grep '^data: {' "$TMP/sse" | sed 's/^data: //' | jq -s '[.[] | select(.usage)] | .[0].usage.completion_tokens')" "3/24"
post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":5}"
check "n above --parallel is a 400 naming n" is "$CODE/$(jb .error.param)" 400/n
post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"}],\"tools\":$TOOLS,\"tool_choice\":\"required\",\"max_tokens\":100,\"seed\":3,\"n\":2}"
check "n=2 forced calls: both valid" is "$(jb "[.choices[] | .finish_reason==\"tool_calls\" and (.message.tool_calls[0] | $ARGS_OK)] | all")" true
kvt_stop_server choices

# tool_round STYLE FIRST EXTRA WHAT: under STYLE's chat template, a forced call after the messages
# FIRST, then its result sent back with EXTRA in the request, the arguments re-serialized (as
# LangChain does: the call memo restores kvtier's text). Checks that the call parses and that the
# next step reuses WHAT from the cache; the history is left in H2, the next step's answer in $TMP/body.
tool_round() {
  local style=$1 first=$2 extra=$3 what=$4 p1 c1 a1 id1
  post /v1/chat/completions "{\"messages\":[$first],\"tools\":$TOOLS,\"tool_choice\":\"required\",\"max_tokens\":120,\"seed\":2}"
  check "$style: a forced call parses" is "$(jb "(.choices[0].finish_reason==\"tool_calls\") and (.choices[0].message.tool_calls[0] | $ARGS_OK)")" true
  p1=$(jb .usage.prompt_tokens) c1=$(jb .usage.completion_tokens) a1=$(jb -c '.choices[0].message') id1=$(jb '.choices[0].message.tool_calls[0].id')
  a1=$(jq -c '.tool_calls[0].function.arguments |= (fromjson | tojson)' <<<"$a1")
  H2="$first,$a1,{\"role\":\"tool\",\"tool_call_id\":\"$id1\",\"content\":\"5\"}"
  post /v1/chat/completions "{\"messages\":[$H2],\"tools\":$TOOLS,\"max_tokens\":4$extra}"
  check "$style: the next step reuses $what from the cache" ge "$(jb .usage.prompt_tokens_details.cached_tokens)" $(( (p1 + c1) / 32 * 32 ))
}

# ---- the Llama 3 style: {"name": ..., "parameters": ...} -------------------------------------------
kvt_start_server llama3 --chat-template llama3
tool_round llama3 '{"role":"user","content":"2+3?"}' '' 'the call'
kvt_stop_server llama3

# ---- the Mistral style: [AVAILABLE_TOOLS] before the first user turn, [TOOL_CALLS][...] -------------
kvt_start_server mistral --chat-template mistral
tool_round mistral '{"role":"system","content":"Be brief."},{"role":"user","content":"2+3?"}' ',"ignore_eos":true' \
  'the tools and the call'
P2=$(jb .usage.prompt_tokens) C2=$(jb .usage.completion_tokens) A2=$(jb -c '.choices[0].message')
# a new user turn: the tool block stays where it was, so the whole history is a cached prefix
post /v1/chat/completions "{\"messages\":[$H2,$A2,{\"role\":\"user\",\"content\":\"And 4+4?\"}],\"tools\":$TOOLS,\"max_tokens\":4}"
check "mistral: a new user turn keeps the history cached" ge "$(jb .usage.prompt_tokens_details.cached_tokens)" $(( (P2 + C2) / 32 * 32 ))
# Mistral's one [TOOL_CALLS] array cut inside a call: the call as far as it got, as the other styles
cut_sweep mistral '[TOOL_CALLS]'
kvt_stop_server mistral

kvt_test_done test_server_tools
