#!/usr/bin/env bash
# The Responses API end to end over loopback, on a random-weight model: a
# response object and its stream of events, previous_response_id reusing the
# whole earlier conversation from the cache, a function call and its output as
# items, json_schema output, stored responses per API key (GET, DELETE, 404 for
# another key), --responses-max, --responses-ttl, and the 400s (naming the
# field as param) for fields kvtier would ignore.
# Also chat completions streaming a tool call's arguments as fragments that
# reassemble to the non-streamed call. Needs curl and jq (the openai package is
# not used: the events are checked as JSON).
set -u
command -v curl >/dev/null && command -v jq >/dev/null || { echo "SKIP: needs curl and jq"; exit 77; }
. "$(dirname "$0")/../testutil.sh"
has() { grep -q -- "$2" <<<"$1" || { echo "  '$1' lacks '$2'" >&2; return 1; }; }

"$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 >/dev/null 2>&1 || { echo "mkmodel failed"; exit 1; }
KVT_SERVE_ARGS=(-m "$TMP/m.gguf" -t 1 -c 2048 --api-key k1 --api-key k2)
K1=(-H 'Authorization: Bearer k1')
K2=(-H 'Authorization: Bearer k2')
# sse PATH JSON: the stream of a POST (key k1) into $TMP/sse
sse() { curl -s -m 120 -N -H 'Content-Type: application/json' "${K1[@]}" -d "$2" "$URL$1" >"$TMP/sse"; }
# events: the stream's event objects, one JSON array
events() { grep '^data: {' "$TMP/sse" | sed 's/^data: //' | jq -sc .; }
# types: the events' types, a run of deltas as one (how many fragments arrive depends on timing)
types() { jq -c '[.[].type] | reduce .[] as $t ([]; if .[-1] == $t and ($t | endswith(".delta")) then . else . + [$t] end)'; }

kvt_start_server main -np 2

# ---- a response ---------------------------------------------------------------------------------
post /v1/responses '{"input":"Tell me about caches.","instructions":"Be brief.","max_output_tokens":6,"temperature":0}' "${K1[@]}"
check "POST /v1/responses is 200" is "$CODE" 200
check "... a response object" is "$(jb -c '[.object, (.id|startswith("resp_")), .instructions, .max_output_tokens]')" '["response",true,"Be brief.",6]'
check "... one assistant message with output_text" is "$(jb -c '[.output[] | [.type, .role, .content[0].type]]')" '[["message","assistant","output_text"]]'
check "... stopped by max_output_tokens: incomplete" is "$(jb -c '[.status, .incomplete_details.reason]')" '["incomplete","max_output_tokens"]'
check "... usage: input, output and cached tokens" is "$(jb -c '[.usage.output_tokens, (.usage.input_tokens > 0), .usage.input_tokens_details.cached_tokens, .usage.total_tokens == .usage.input_tokens + .usage.output_tokens]')" '[6,true,0,true]'
check "... and kvtier's report by tier" is "$(jb -c '.kvtier.cached_tokens_by_tier | keys')" '["T0","T1","T2","T3"]'
ID0=$(jb .id) BODY0=$(jb -c 'del(.kvtier)')
post /v1/chat/completions '{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Tell me about caches."}],"max_tokens":6,"temperature":0}' "${K1[@]}"
check "the same text as the chat completion it runs as" is "$(jb '.choices[0].message.content')" "$(jq -r '.output[0].content[0].text' <<<"$BODY0")"

# ---- stored responses belong to their key --------------------------------------------------------
curl -s -m 30 -o "$TMP/body" -w '%{http_code}' "${K1[@]}" "$URL/v1/responses/$ID0" >"$TMP/code"
check "GET /v1/responses/{id} gives the stored response" is "$(cat "$TMP/code")/$(jb -c 'del(.kvtier)')" "200/$BODY0"
curl -s -m 30 -o "$TMP/body" -w '%{http_code}' "${K2[@]}" "$URL/v1/responses/$ID0" >"$TMP/code"
check "... another API key gets a 404" is "$(cat "$TMP/code")/$(jb .error.code)" 404/not_found
post /v1/responses "{\"previous_response_id\":\"$ID0\",\"input\":\"more\"}" "${K2[@]}"
check "... and a 404 naming previous_response_id for it" is "$CODE/$(jb .error.param)" 404/previous_response_id
curl -s -m 30 -o "$TMP/body" -w '%{http_code}' -X DELETE "${K2[@]}" "$URL/v1/responses/$ID0" >"$TMP/code"
check "... and cannot delete it (404)" is "$(cat "$TMP/code")" 404
# OpenAI's input_items list (the SDKs' responses.inputItems.list): the items a response was made from,
# newest first, each with an id that stays the same when a follow-up lists it as history
items() { curl -s -m 30 -o "$TMP/body" -w '%{http_code}' "${K1[@]}" "$URL/v1/responses/$1/input_items${2:-}" >"$TMP/code"; }
items "$ID0"
check "GET /v1/responses/{id}/input_items lists its input" is "$(cat "$TMP/code")/$(jb -c \
  '[.object, [.data[] | [.type, .role, .content[0].type, .content[0].text, (.id | startswith("msg_"))]], .has_more]')" \
  '200/["list",[["message","user","input_text","Tell me about caches.",true]],false]'
ITEM0=$(jb '.data[0].id')
post /v1/responses "{\"previous_response_id\":\"$ID0\",\"input\":[{\"role\":\"user\",\"content\":\"more\"}],\"max_output_tokens\":2}" "${K1[@]}"
ID1=$(jb .id)
items "$ID1"
check "a follow-up's: its input, the reply before it, that history, newest first" is \
  "$(jb -c '[.data[] | [.role, .content[0].text]] | [.[0], .[1][0], .[2]]')" '[["user","more"],"assistant",["user","Tell me about caches."]]'
check "... the history item keeps its id" is "$(jb '.data[2].id')/$(jb .last_id)" "$ITEM0/$ITEM0"
items "$ID1" '?order=asc&limit=2'
check "order=asc&limit=2: the first two, and more" is "$(jb -c '[.data[0].id, (.data | length), .has_more]')" "[\"$ITEM0\",2,true]"
items "$ID1" "?order=asc&after=$(jb .last_id)"
check "after the last one: the rest" is "$(jb -c '[(.data | length), .data[0].content[0].text, .has_more]')" '[1,"more",false]'
items "$ID1" '?limit=0'
check "limit 0 is a 400 naming it" is "$(cat "$TMP/code")/$(jb .error.param)" 400/limit
curl -s -m 30 -o "$TMP/body" -w '%{http_code}' "${K2[@]}" "$URL/v1/responses/$ID0/input_items" >"$TMP/code"
check "another key's response: 404" is "$(cat "$TMP/code")" 404
curl -s -m 30 -o "$TMP/body" -w '%{http_code}' -X DELETE "${K1[@]}" "$URL/v1/responses/$ID0" >"$TMP/code"
check "DELETE by its own key" is "$(cat "$TMP/code")/$(jb -c '[.id, .deleted]')" "200/[\"$ID0\",true]"
curl -s -m 30 -o "$TMP/body" -w '%{http_code}' "${K1[@]}" "$URL/v1/responses/$ID0" >"$TMP/code"
check "... then it is gone" is "$(cat "$TMP/code")" 404
curl -s -m 30 -o "$TMP/body" -w '%{http_code}' -X PUT "${K1[@]}" "$URL/v1/responses/$ID0" >"$TMP/code"
check "PUT is a 405" is "$(cat "$TMP/code")" 405
post /v1/responses '{"input":"not kept","store":false,"max_output_tokens":2}' "${K1[@]}"
NOSTORE=$(jb .id)
check "store false answers" is "$CODE/$(jb .store)" 200/false
curl -s -m 30 -o /dev/null -w '%{http_code}' "${K1[@]}" "$URL/v1/responses/$NOSTORE" >"$TMP/code"
check "... and keeps nothing" is "$(cat "$TMP/code")" 404

# ---- previous_response_id: the earlier conversation comes from the cache --------------------------
INS='"instructions":"You answer questions about tiered caches in one short sentence each time."'
post /v1/responses "{\"input\":\"What is T0?\",$INS,\"max_output_tokens\":40,\"temperature\":0}" "${K1[@]}"
P1=$(jb .usage.input_tokens) C1=$(jb .usage.output_tokens) PREV=$(jb .id)
check "turn 1 writes a block's worth (40 tokens)" is "$C1" 40
for turn in 2 3 4 5; do
  post /v1/responses "{\"previous_response_id\":\"$PREV\",\"input\":\"And turn $turn?\",$INS,\"max_output_tokens\":8,\"temperature\":0}" "${K1[@]}"
  check "turn $turn: 200 naming its previous response" is "$CODE/$(jb .previous_response_id)" "200/$PREV"
  CACHED=$(jb .usage.input_tokens_details.cached_tokens)
  # all of the previous turn's prompt and reply but its last partial block (32 tokens) is reused
  # (the reply's last token never went through the model, so it counts as unwritten);
  # turn 1's reply is longer than a block, so turn 2 reuses all of turn 1's prompt
  [ "$turn" = 2 ] && check "turn 2: cached tokens ($CACHED) cover turn 1's whole prompt ($P1)" ge "$CACHED" "$P1"
  check "turn $turn: cached tokens ($CACHED) cover the previous prompt and reply to the block" ge "$CACHED" $(((P1 + C1 - 1) / 32 * 32))
  P1=$(jb .usage.input_tokens) C1=$(jb .usage.output_tokens) PREV=$(jb .id)
done

# ---- a stream of events ----------------------------------------------------------------------------
sse /v1/responses '{"input":"Tell me about caches.","instructions":"Be brief.","max_output_tokens":6,"temperature":0,"stream":true}'
EV=$(events)
check "stream: the event sequence" is "$(jq -c '[.[].type]' <<<"$EV")" '["response.created","response.in_progress","response.output_item.added","response.content_part.added",'"$(jq -c '[.[].type | select(. == "response.output_text.delta")]' <<<"$EV" | tr -d '[]')"',"response.output_text.done","response.content_part.done","response.output_item.done","response.incomplete"]'
check "... with at least one text delta" ge "$(jq '[.[] | select(.type == "response.output_text.delta")] | length' <<<"$EV")" 1
check "... sequence numbers 0, 1, 2, ..." is "$(jq -c '[.[].sequence_number] == [range(length)]' <<<"$EV")" true
check "... every event line named as its type" is "$(grep -c '^event: response\.' "$TMP/sse")" "$(jq length <<<"$EV")"
check "... the deltas make the done text" is "$(jq -r '[.[] | select(.type == "response.output_text.delta") | .delta] | add' <<<"$EV")" "$(jq -r '.[] | select(.type == "response.output_text.done") | .text' <<<"$EV")"
check "... which is the non-streamed text" is "$(jq -r '.[-1].response.output[0].content[0].text' <<<"$EV")" "$(jq -r '.output[0].content[0].text' <<<"$BODY0")"
check "... and the last event has usage" is "$(jq -c '.[-1].response.usage.output_tokens' <<<"$EV")" 6

# ---- function calls and their outputs as items -----------------------------------------------------
TOOLS='[{"type":"function","name":"add","description":"Adds two numbers","parameters":{"type":"object",
 "properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"],"additionalProperties":false}}]'
ASK='[{"role":"user","content":[{"type":"input_text","text":"What is 2+3?"}]}]'
post /v1/responses "{\"input\":$ASK,\"tools\":$TOOLS,\"tool_choice\":\"required\",\"max_output_tokens\":60,\"seed\":4}" "${K1[@]}"
check "a forced call is a function_call item" is "$(jb -c '[.output[] | .type]')" '["function_call"]'
check "... of add with arguments of its schema" is "$(jb -c '.output[0] | [.name, (.arguments | fromjson | (.a|type) + (.b|type)), (.call_id|startswith("call_")), .status]')" '["add","numbernumber",true,"completed"]'
check "... and the response is completed" is "$(jb .status)" completed
CALL=$(jb -c '.output[0]') CID=$(jb '.output[0].call_id') FC=$(jb .id) P1=$(jb .usage.input_tokens)
sse /v1/responses "{\"input\":$ASK,\"tools\":$TOOLS,\"tool_choice\":\"required\",\"max_output_tokens\":60,\"seed\":4,\"stream\":true}"
EV=$(events)
check "stream: a call's events" is "$(types <<<"$EV")" '["response.created","response.in_progress","response.output_item.added","response.function_call_arguments.delta","response.function_call_arguments.done","response.output_item.done","response.completed"]'
check "... announced with its call_id and name, arguments empty" is "$(jq -c '.[2].item | [(.call_id | startswith("call_")), .call_id == $e[0].response.output[0].call_id, .name, .arguments, .status]' --slurpfile e <(jq -c '.[-1]' <<<"$EV") <<<"$EV")" '[true,true,"add","","in_progress"]'
check "... its argument deltas ($(jq '[.[] | select(.type == "response.function_call_arguments.delta")] | length' <<<"$EV")) make the non-streamed arguments" is "$(jq -r '[.[] | select(.type == "response.function_call_arguments.delta") | .delta] | add' <<<"$EV")" "$(jq -r .arguments <<<"$CALL")"
check "... as do the done event and the item" is "$(jq -c '[(.[] | select(.type == "response.function_call_arguments.done") | .arguments), .[-1].response.output[0].arguments] | unique | length' <<<"$EV")" 1
post /v1/responses "{\"previous_response_id\":\"$FC\",\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"$CID\",\"output\":\"5\"}],\"tools\":$TOOLS,\"max_output_tokens\":4,\"seed\":5}" "${K1[@]}"
check "the call's output as an item after previous_response_id" is "$CODE" 200
check "... reuses the prompt and the call" ge "$(jb .usage.input_tokens_details.cached_tokens)" "$P1"
post /v1/responses "{\"input\":[${ASK:1:${#ASK}-2},$CALL,{\"type\":\"function_call_output\",\"call_id\":\"$CID\",\"output\":\"5\"}],\"tools\":$TOOLS,\"max_output_tokens\":4,\"seed\":5,\"store\":false}" "${K1[@]}"
check "the same conversation sent whole as items" is "$CODE" 200
check "... reuses it as well" ge "$(jb .usage.input_tokens_details.cached_tokens)" "$P1"
REF="{\"input\":[${ASK:1:${#ASK}-2},{\"type\":\"item_reference\",\"id\":\"$(jq -r .id <<<"$CALL")\"},{\"type\":\"function_call_output\",\"call_id\":\"$CID\",\"output\":\"5\"}],\"tools\":$TOOLS,\"max_output_tokens\":4,\"seed\":5,\"store\":false}"
post /v1/responses "$REF" "${K1[@]}"
check "the call named by an item_reference" is "$CODE" 200
check "... reuses it as well" ge "$(jb .usage.input_tokens_details.cached_tokens)" "$P1"
post /v1/responses "$REF" "${K2[@]}"
check "... another API key cannot name it (404 naming input)" is "$CODE/$(jb .error.param)" 404/input

# ---- chat completions stream a tool call's arguments as they are generated -------------------------
CTOOLS=$(jq -c '[.[] | {type, function: {name, description, parameters}}]' <<<"$TOOLS")
CHAT="{\"messages\":[{\"role\":\"user\",\"content\":\"2+3?\"}],\"tools\":$CTOOLS,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"add\"}},\"max_tokens\":120,\"seed\":4"
post /v1/chat/completions "$CHAT}" "${K1[@]}"
NS=$(jb -c '.choices[0].message.tool_calls[0] | [(.id | startswith("call_")), .function.name, .function.arguments]')
sse /v1/chat/completions "$CHAT,\"stream\":true}"
CALLS=$(grep '^data: {' "$TMP/sse" | sed 's/^data: //' | jq -sc '[.[].choices[0].delta.tool_calls // [] | .[] | select(.index == 0)]')
check "chat stream: the call's chunks ($(jq length <<<"$CALLS")) reassemble to the non-streamed call" is "$(jq -c '[(map(.id // "") | add | startswith("call_")), (map(.function.name // "") | add), (map(.function.arguments // "") | add)]' <<<"$CALLS")" "$NS"
check "... the first carries id, type and name; the others only arguments" is "$(jq -c '(.[0] | (.id | length > 0) and .type == "function" and (.function.name | length > 0)) and (.[1:] | all(has("id") or has("type") or (.function | has("name")) | not))' <<<"$CALLS")" true
check "... and it finishes with tool_calls" is "$(grep -c '"finish_reason":"tool_calls"' "$TMP/sse")" 1

# ---- json_schema output ---------------------------------------------------------------------------
SCHEMA='{"type":"object","properties":{"city":{"type":"string","maxLength":12},"n":{"type":"integer"}},"required":["city","n"],"additionalProperties":false}'
good=0
for seed in 1 2 3 4; do
  post /v1/responses "{\"input\":\"JSON please\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"c\",\"strict\":true,\"schema\":$SCHEMA}},\"max_output_tokens\":80,\"seed\":$seed}" "${K1[@]}"
  [ "$(jb '.output[0].content[0].text | fromjson | (.city|type=="string") and (.n|type=="number" and .==floor) and (keys|length==2)' 2>/dev/null)" = true ] && good=$((good + 1))
done
check "text.format json_schema: 4 of 4 seeds validate" is "$good" 4
check "... and the response echoes the format" is "$(jb .text.format.name)" c
post /v1/responses '{"input":"x","text":{"format":{"type":"json_schema","name":"c"}}}' "${K1[@]}"
check "json_schema without a schema is a 400 naming text" is "$CODE/$(jb .error.param)" 400/text

# ---- fields kvtier would ignore are refused by name ----------------------------------------------
post /v1/responses '{"input":"x","frobnicate":1}' "${K1[@]}"
check "an unknown field is a 400" is "$CODE/$(jb .error.code)" 400/unknown_parameter
check "... naming it" has "$(jb .error.message)" "'frobnicate'"
check "... and as its param" is "$(jb .error.param)" frobnicate
post /v1/responses '{"input":"x","background":true}' "${K1[@]}"
check "background true is a 400 naming it" is "$CODE/$(jb .error.param)" 400/background
post /v1/responses '{"input":"x","background":false,"metadata":{"a":"b"},"user":"u","truncation":"disabled","include":[]}' "${K1[@]}"
check "... their neutral values are accepted" is "$CODE/$(jb .metadata.a)" 200/b
post /v1/responses '{"input":"x","stream_options":{"include_obfuscation":false}}' "${K1[@]}"
check "stream_options without stream is a 400 naming it, as OpenAI's" is "$CODE/$(jb .error.param)" 400/stream_options
post /v1/responses '{"input":"x","max_output_tokens":2,"stream":false,"stream_options":null}' "${K1[@]}"
check "... stream_options null is fine" is "$CODE" 200
post /v1/responses '{"input":"x","tools":[{"type":"web_search"}]}' "${K1[@]}"
check "a hosted tool is a 400 naming tools" is "$CODE/$(jb .error.param)" 400/tools
post /v1/responses '{"input":[{"role":"user","content":[{"type":"input_image","image_url":"http://x"}]}]}' "${K1[@]}"
check "an image part is a 400 naming input[0].content" is "$CODE/$(jb .error.param)" "400/input[0].content"
# an item without what its type needs: a 400 whose param names the field with its index, as OpenAI's
post /v1/responses '{"input":[{"role":"user","content":"q"},{"type":"function_call_output","output":"5"}]}' "${K1[@]}"
check "a function_call_output without call_id is a 400 naming input[1].call_id" \
  is "$CODE/$(jb .error.param)/$(jb .error.code)" "400/input[1].call_id/missing_required_parameter"
check "... and its message names the item" grep -q 'input\[1\].call_id is required' "$TMP/body"
post /v1/responses '{"input":[{"role":"user"}]}' "${K1[@]}"
check "a message item without content is a 400 naming input[0].content" \
  is "$CODE/$(jb .error.param)/$(jb .error.code)" "400/input[0].content/missing_required_parameter"
post /v1/responses '{"input":[{"role":"user","content":[]}]}' "${K1[@]}"
check "a message item with content [] is a 400 naming input[0].content" \
  is "$CODE/$(jb .error.param)/$(jb .error.code)" "400/input[0].content/missing_required_parameter"
post /v1/responses '{"input":[{"role":"user","content":"q"},{"type":"function_call_output","call_id":"nope","output":"5"}]}' "${K1[@]}"
check "a function_call_output that answers no function_call is a 400 naming input[1].call_id" \
  is "$CODE/$(jb .error.param)/$(jb .error.code)" "400/input[1].call_id/invalid_value"
post /v1/chat/completions '{"messages":[{"role":"user","content":"q"},{"role":"tool","tool_call_id":"nope","content":"5"}]}' "${K1[@]}"
check "... as a chat tool message whose tool_call_id answers no call is, naming messages[1].tool_call_id" \
  is "$CODE/$(jb .error.param)/$(jb .error.code)" "400/messages[1].tool_call_id/invalid_value"
post /v1/responses '{"input":"x","max_output_tokens":0}' "${K1[@]}"
check "a bad max_output_tokens is a 400 naming it" is "$CODE/$(jb .error.param)" 400/max_output_tokens
post /v1/responses '{"instructions":"x"}' "${K1[@]}"
check "no input is a 400 naming input" is "$CODE/$(jb .error.param)" 400/input
check "the server stops cleanly (exit 0: no sanitizer report)" kvt_stop_server main

# ---- --responses-max: the least recently used go first ---------------------------------------------
# (with a TTL that is set but far off: the two kept ones are served)
kvt_start_server small --responses-max 2 --responses-ttl 3600
ids=()
for i in 1 2 3; do
  post /v1/responses "{\"input\":\"r$i\",\"max_output_tokens\":2}" "${K1[@]}"
  ids+=("$(jb .id)")
done
codes=$(for id in "${ids[@]}"; do curl -s -m 30 -o /dev/null -w '%{http_code} ' "${K1[@]}" "$URL/v1/responses/$id"; done)
check "--responses-max 2: the first of three is dropped, the live ones served" is "$codes" "404 200 200 "
check "... and stops cleanly" kvt_stop_server small

# ---- --responses-ttl: a stored response is gone once its time is up ---------------------------------
kvt_start_server ttl --responses-ttl 1
post /v1/responses '{"input":"short-lived","max_output_tokens":2}' "${K1[@]}"
check "--responses-ttl 1: a response is made and stored" is "$CODE/$(jb .store)" 200/true
OLD=$(jb .id)
get_code() { curl -s -m 30 -o "$TMP/body" -w '%{http_code}' "${K1[@]}" "$URL/v1/responses/$1"; }
expired() { [ "$(get_code "$1")" = 404 ]; }
check "... GET answers 404 once its second is up" wait_for expired "$OLD"
check "... not_found, as for an unknown id" is "$(get_code "$OLD")/$(jb .error.code)" 404/not_found
post /v1/responses "{\"previous_response_id\":\"$OLD\",\"input\":\"more\"}" "${K1[@]}"
check "... previous_response_id naming it: the 404 of an unknown id" is "$CODE/$(jb .error.param)/$(jb .error.code)" \
  404/previous_response_id/previous_response_not_found
curl -s -m 30 -o "$TMP/body" -w '%{http_code}' -X DELETE "${K1[@]}" "$URL/v1/responses/$OLD" >"$TMP/code"
check "... DELETE answers 404" is "$(cat "$TMP/code")" 404
check "... and stops cleanly" kvt_stop_server ttl
"$BIN" serve --help >"$TMP/help" 2>&1 || true
check "serve --help explains --responses-ttl" grep -q -- '--responses-ttl S' "$TMP/help"
check "a negative --responses-ttl is refused" expect_rc 2 "$BIN" serve -m "$TMP/m.gguf" --responses-ttl -1
check "... naming the flag" grep -q -- 'responses-ttl' "$TMP/out"

kvt_test_done test_server_responses
