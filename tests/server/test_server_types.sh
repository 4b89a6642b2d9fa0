#!/usr/bin/env bash
# Every request field kvtier reads or accepts refuses a JSON value of the
# wrong type with a 400 "invalid_type" whose param is the field's place
# ("messages[1].name", "response_format.json_schema.strict", "metadata.k"),
# on every route that takes a body, over loopback with a tiny generated
# model: a table of (route, valid body, field, the types it may hold, param)
# where each row's field is set, in turn, to every JSON type it may not hold,
# also where the field never changes the output ("user", "store"). The valid
# bodies themselves, with each field at a right type (null included where
# null stands for absent), still succeed. Needs curl, jq and python3.
set -u
command -v curl >/dev/null && command -v jq >/dev/null && command -v python3 >/dev/null ||
  { echo "SKIP: needs curl, jq and python3"; exit 77; }
. "$(dirname "$0")/../testutil.sh"

"$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 >/dev/null 2>&1 || { echo "mkmodel failed"; exit 1; }
kvt_start_server main -m "$TMP/m.gguf" --host 127.0.0.1 -t 1 --ctx 2048 --max-tokens-limit 64 --embeddings

cat >"$TMP/types.py" <<'EOF'
import http.client, json, sys

port = int(sys.argv[1])
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

def post(route, body):
    global conn
    data = json.dumps(body).encode()
    for attempt in range(2):
        try:
            conn.request("POST", route, data, {"Content-Type": "application/json"})
            r = conn.getresponse()
            return r.status, r.read()
        except (http.client.HTTPException, OSError):
            conn.close()  # the server closed a kept-alive connection: once more on a new one
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    raise SystemExit("no answer from the server on " + route)

MSGS = [
    {"role": "system", "content": "be brief", "name": "rules"},
    {"role": "user", "content": [{"type": "text", "text": "weather?"}], "name": "alice"},
    {"role": "assistant", "content": None, "name": "bot",
     "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "42", "name": "f"},
    {"role": "assistant", "content": "ok", "reasoning_content": "r", "refusal": None},
    {"role": "user", "content": "again", "name": None},
]
TOOLS = [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"},
                                           "strict": False}}]
BASES = {
    # a chat with every field it takes, each at a type it may hold
    "chat": {"messages": MSGS, "model": None, "max_tokens": 2, "max_completion_tokens": 2, "n_predict": 2,
             "temperature": 0, "top_p": 1, "top_k": 0, "min_p": 0, "seed": 1, "n": 1, "logprobs": True,
             "top_logprobs": 1, "presence_penalty": 0, "frequency_penalty": 0, "repeat_penalty": 1,
             "repeat_last_n": 8, "samplers": ["top_k", "temperature"], "logit_bias": {"1": 0}, "stop": ["zz"],
             "stream": False, "stream_options": None, "ignore_eos": False, "cache_salt": "s",
             "tools": TOOLS, "tool_choice": "auto", "parallel_tool_calls": True, "grammar": None,
             "kvtier": {"session_id": "s1", "priority": 1, "keep_warm_s": 0, "documents": [{"id": "d", "text": "t"}],
                        "reuse": "exact", "rag": None, "recompute_ratio": None},
             "chat_template_kwargs": {}, "reasoning_format": "none",
             "user": "u", "metadata": {"k": "v"}, "store": False, "service_tier": "auto", "safety_identifier": "i",
             "prompt_cache_key": "p", "prediction": {"type": "content", "content": "x"}, "cache_prompt": True,
             "best_of": 1, "echo": False, "suffix": "", "typical_p": 1, "tfs_z": 1, "mirostat": 0,
             "dynatemp_range": 0, "xtc_probability": 0, "dry_multiplier": 0, "top_n_sigma": -1, "min_keep": 0,
             "t_max_predict_ms": 0, "n_indent": 0, "post_sampling_probs": False, "lora": [], "n_probs": 0,
             "functions": [], "function_call": "auto", "modalities": ["text"], "audio": None,
             "reasoning_effort": None, "verbosity": None, "web_search_options": None,
             "repetition_penalty": 1, "min_tokens": 0, "stop_token_ids": [], "guided_json": None,
             "guided_choice": None},
    "chat_json": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                  "response_format": {"type": "json_schema", "json_schema": {"name": "v", "description": "d",
                                      "schema": {"type": "object"}, "strict": True}}},
    "chat_stream": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": True,
                    "stream_options": {"include_usage": True}},
    "chat_grammar": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "grammar": "root ::= \"a\"",
                     "json_schema": None},
    "chat_pairs": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
                   "logit_bias": [[1, 0], ["a", False]]},
    "completion": {"prompt": "hi", "max_tokens": 2, "logprobs": 1, "echo": False, "stop": "zz", "suffix": None},
    "llama": {"prompt": "hi", "n_predict": 2, "id_slot": -1, "return_tokens": True, "n_probs": 1,
              "cache_prompt": True},
    "responses": {"input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                            {"type": "function_call_output", "call_id": "c1", "output": "42"}],
                  "instructions": "be brief", "max_output_tokens": 2, "temperature": 0, "top_p": 1, "top_k": 0,
                  "min_p": 0, "seed": 1, "store": False, "stream": False, "cache_salt": "s",
                  "tools": [{"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"},
                             "strict": False}],
                  "tool_choice": "auto", "parallel_tool_calls": True, "text": {"format": {"type": "text"}},
                  "metadata": {"k": "v"}, "user": "u", "service_tier": "auto", "safety_identifier": "i",
                  "prompt_cache_key": "p", "include": [], "truncation": "disabled", "reasoning": {"effort": None},
                  "background": False, "top_logprobs": 0, "max_tool_calls": None, "conversation": None,
                  "prompt": None, "previous_response_id": None, "kvtier": {"priority": 1}},
    "responses_json": {"input": "hi", "max_output_tokens": 4, "store": False,
                       "text": {"format": {"type": "json_schema", "name": "v", "schema": {"type": "object"},
                                           "strict": True}}},
    "tokenize": {"content": "hi", "add_special": False, "parse_special": True, "with_pieces": True},
    "detokenize": {"tokens": [1, 2]},
    "embeddings": {"input": ["hi", [1, 2]], "model": None, "encoding_format": "float", "dimensions": 64,
                   "user": "u", "cache_salt": "s"},
    "prefill": {"prompt": "hi", "kvtier": {"session_id": "s2"}},
}
ROUTES = {"chat": "/v1/chat/completions", "chat_json": "/v1/chat/completions", "chat_stream": "/v1/chat/completions",
          "chat_grammar": "/v1/chat/completions", "chat_pairs": "/v1/chat/completions", "completion": "/v1/completions", "llama": "/completion",
          "responses": "/v1/responses", "responses_json": "/v1/responses", "tokenize": "/tokenize",
          "detokenize": "/detokenize", "embeddings": "/v1/embeddings", "prefill": "/v1/cache/prefill"}

# (body, field path, the types it may hold, param): n null, b boolean, i number, s string, a array, o object
ROWS = """
chat messages a messages
chat messages.0 o messages[0]
chat messages.0.role s messages[0].role
chat messages.1.content nsa messages[1].content
chat messages.1.content.0 o messages[1].content[0]
chat messages.1.content.0.type s messages[1].content[0].type
chat messages.1.content.0.text s messages[1].content[0].text
chat messages.0.name ns messages[0].name
chat messages.1.name ns messages[1].name
chat messages.2.name ns messages[2].name
chat messages.3.name ns messages[3].name
chat messages.3.tool_call_id ns messages[3].tool_call_id
chat messages.2.tool_calls na messages[2].tool_calls
chat messages.2.tool_calls.0 o messages[2].tool_calls[0]
chat messages.2.tool_calls.0.id s messages[2].tool_calls[0].id
chat messages.2.tool_calls.0.type s messages[2].tool_calls[0].type
chat messages.2.tool_calls.0.function o messages[2].tool_calls[0].function
chat messages.2.tool_calls.0.function.name s messages[2].tool_calls[0].function.name
chat messages.2.tool_calls.0.function.arguments s messages[2].tool_calls[0].function.arguments
chat messages.4.reasoning_content ns messages[4].reasoning_content
chat messages.4.refusal ns messages[4].refusal
chat model ns model
chat max_tokens ni max_tokens
chat max_completion_tokens ni max_completion_tokens
chat n_predict ni n_predict
chat temperature ni temperature
chat top_p ni top_p
chat top_k ni top_k
chat min_p ni min_p
chat seed ni seed
chat n ni n
chat logprobs nb logprobs
chat top_logprobs ni top_logprobs
chat presence_penalty ni presence_penalty
chat frequency_penalty ni frequency_penalty
chat repeat_penalty ni repeat_penalty
chat repeat_last_n ni repeat_last_n
chat samplers nsa samplers
chat samplers.1 s samplers[1]
chat logit_bias noa logit_bias
chat logit_bias.1 i logit_bias.1
chat stop nsa stop
chat stop.0 s stop[0]
chat stream nb stream
chat ignore_eos nb ignore_eos
chat cache_salt ns cache_salt
chat tools na tools
chat tools.0 o tools[0]
chat tools.0.type s tools[0].type
chat tools.0.function o tools[0].function
chat tools.0.function.name s tools[0].function.name
chat tools.0.function.description ns tools[0].function.description
chat tools.0.function.parameters no tools[0].function.parameters
chat tools.0.function.strict nb tools[0].function.strict
chat tool_choice nso tool_choice
chat parallel_tool_calls nb parallel_tool_calls
chat kvtier no kvtier
chat kvtier.session_id ns kvtier.session_id
chat kvtier.priority ni kvtier.priority
chat kvtier.keep_warm_s ni kvtier.keep_warm_s
chat kvtier.documents na kvtier.documents
chat kvtier.documents.0 o kvtier.documents[0]
chat kvtier.documents.0.id s kvtier.documents[0].id
chat kvtier.documents.0.text s kvtier.documents[0].text
chat kvtier.rag no kvtier.rag
chat kvtier.reuse ns kvtier.reuse
chat kvtier.recompute_ratio ni kvtier.recompute_ratio
chat chat_template_kwargs no chat_template_kwargs
chat reasoning_format ns reasoning_format
chat user ns user
chat metadata no metadata
chat metadata.k s metadata.k
chat store nb store
chat service_tier ns service_tier
chat safety_identifier ns safety_identifier
chat prompt_cache_key ns prompt_cache_key
chat prediction no prediction
chat prediction.type s prediction.type
chat prediction.content sa prediction.content
chat cache_prompt nb cache_prompt
chat best_of ni best_of
chat echo nb echo
chat suffix ns suffix
chat typical_p ni typical_p
chat tfs_z ni tfs_z
chat mirostat ni mirostat
chat dynatemp_range ni dynatemp_range
chat dynatemp_exponent ni dynatemp_exponent
chat mirostat_tau ni mirostat_tau
chat mirostat_eta ni mirostat_eta
chat xtc_threshold ni xtc_threshold
chat xtc_probability ni xtc_probability
chat dry_multiplier ni dry_multiplier
chat top_n_sigma ni top_n_sigma
chat min_keep ni min_keep
chat t_max_predict_ms ni t_max_predict_ms
chat n_indent ni n_indent
chat post_sampling_probs nb post_sampling_probs
chat lora na lora
chat n_probs ni n_probs
chat functions na functions
chat function_call nso function_call
chat modalities na modalities
chat modalities.0 s modalities[0]
chat audio no audio
chat reasoning_effort ns reasoning_effort
chat verbosity ns verbosity
chat web_search_options no web_search_options
chat repetition_penalty ni repetition_penalty
chat min_tokens ni min_tokens
chat stop_token_ids na stop_token_ids
chat guided_json nso guided_json
chat guided_choice na guided_choice
chat_json response_format no response_format
chat_json response_format.type s response_format.type
chat_json response_format.json_schema o response_format.json_schema
chat_json response_format.json_schema.name s response_format.json_schema.name
chat_json response_format.json_schema.description ns response_format.json_schema.description
chat_json response_format.json_schema.schema o response_format.json_schema.schema
chat_json response_format.json_schema.strict nb response_format.json_schema.strict
chat_stream stream_options no stream_options
chat_stream stream_options.include_usage nb stream_options.include_usage
chat_grammar grammar ns grammar
chat_grammar json_schema no json_schema
chat_pairs logit_bias.0 a logit_bias[0]
chat_pairs logit_bias.1.0 is logit_bias[1][0]
chat_pairs logit_bias.0.1 ib logit_bias[0][1]
completion prompt sa prompt
completion logprobs ni logprobs
completion echo nb echo
completion suffix ns suffix
completion stop nsa stop
completion user ns user
llama id_slot ni id_slot
llama return_tokens nb return_tokens
llama n_probs ni n_probs
llama cache_prompt nb cache_prompt
responses input nsa input
responses input.0 o input[0]
responses input.0.role s input[0].role
responses input.0.content sa input[0].content
responses input.0.content.0 o input[0].content[0]
responses input.0.content.0.type s input[0].content[0].type
responses input.0.content.0.text s input[0].content[0].text
responses input.1.type s input[1].type
responses input.1.call_id s input[1].call_id
responses input.1.name s input[1].name
responses input.1.arguments s input[1].arguments
responses input.2.output sa input[2].output
responses instructions ns instructions
responses tools na tools
responses tools.0 o tools[0]
responses tools.0.type s tools[0].type
responses tools.0.name s tools[0].name
responses tools.0.description ns tools[0].description
responses tools.0.parameters no tools[0].parameters
responses tools.0.strict nb tools[0].strict
responses tool_choice nso tool_choice
responses parallel_tool_calls nb parallel_tool_calls
responses text no text
responses text.format no text.format
responses text.format.type s text.format.type
responses max_output_tokens ni max_output_tokens
responses temperature ni temperature
responses top_p ni top_p
responses top_k ni top_k
responses min_p ni min_p
responses seed ni seed
responses store nb store
responses stream nb stream
responses previous_response_id ns previous_response_id
responses cache_salt ns cache_salt
responses metadata no metadata
responses metadata.k s metadata.k
responses user ns user
responses service_tier ns service_tier
responses safety_identifier ns safety_identifier
responses prompt_cache_key ns prompt_cache_key
responses include na include
responses truncation ns truncation
responses reasoning no reasoning
responses reasoning.effort ns reasoning.effort
responses background nb background
responses top_logprobs ni top_logprobs
responses max_tool_calls ni max_tool_calls
responses conversation nso conversation
responses prompt no prompt
responses kvtier no kvtier
responses kvtier.priority ni kvtier.priority
responses_json text.format.name s text.format.name
responses_json text.format.schema o text.format.schema
responses_json text.format.strict nb text.format.strict
tokenize content sa content
tokenize add_special nb add_special
tokenize parse_special nb parse_special
tokenize with_pieces nb with_pieces
detokenize tokens a tokens
detokenize tokens.1 i tokens[1]
embeddings input sa input
embeddings input.0 sia input[0]
embeddings model ns model
embeddings encoding_format ns encoding_format
embeddings dimensions ni dimensions
embeddings user ns user
embeddings cache_salt ns cache_salt
prefill prompt sa prompt
prefill kvtier.session_id ns kvtier.session_id
"""
WRONG = {"n": None, "b": True, "i": 5, "s": "x", "a": [], "o": {}}

def setpath(body, path, value):
    body = json.loads(json.dumps(body))
    node, keys = body, path.split(".")
    for k in keys[:-1]:
        node = node[int(k) if isinstance(node, list) else k]
    node[int(keys[-1]) if isinstance(node, list) else keys[-1]] = value
    return body

fails, sent = [], 0
for name, body in BASES.items():
    status, out = post(ROUTES[name], body)
    sent += 1
    if status != 200:
        fails.append("the valid %s body: %d %s" % (name, status, out[:300]))
for line in ROWS.strip().splitlines():
    base, path, allowed, param = line.split()
    for t, value in WRONG.items():
        if t in allowed:
            continue
        status, out = post(ROUTES[base], setpath(BASES[base], path, value))
        sent += 1
        try:
            err = json.loads(out)["error"]
        except (ValueError, KeyError, TypeError):
            err = {}
        if status != 400 or err.get("param") != param or err.get("code") != "invalid_type":
            fails.append("%s %s = %s: %d param %s code %s (%s)" % (base, path, json.dumps(value), status,
                         err.get("param"), err.get("code"), str(err.get("message"))[:160]))
print("sent %d" % sent)
for f in fails:
    print("FAIL " + f)
EOF
python3 "$TMP/types.py" "$PORT" >"$TMP/types.out" 2>&1
grep FAIL "$TMP/types.out" | head -40 >&2
check "the table ran (over 400 requests)" gt "$(sed -n 's/^sent //p' "$TMP/types.out")" 400
check "every valid body succeeds; every wrong type is a 400 invalid_type naming the field" \
  is "$(grep -c FAIL "$TMP/types.out")" 0

# the message says what the field may hold and what it got
post /v1/chat/completions '{"messages":[{"role":"user","content":"hi","name":7}],"max_tokens":1}'
check "the message names the field, the types it takes and the type sent" \
  is "$(jb .error.message)" "'messages[0].name' must be a string or null, got a number"
kvt_test_done test_server_types
