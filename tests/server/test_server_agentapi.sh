#!/usr/bin/env bash
# What agent clients call besides generation, end to end over loopback:
# llama-server's /tokenize, /detokenize and /props, /v1/models' metadata,
# CORS (--cors-origin), binding IPv6 and host names (--host). Needs curl and jq.
set -u
command -v curl >/dev/null && command -v jq >/dev/null || { echo "SKIP: needs curl and jq"; exit 77; }
. "$(dirname "$0")/../testutil.sh"

"$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 >/dev/null 2>&1 || { echo "mkmodel failed"; exit 1; }
KVT_SERVE_ARGS=(-m "$TMP/m.gguf" -t 1)
get() { CODE=$(curl -s -m 20 -o "$TMP/body" -w '%{http_code}' "$@"); }

# llama.cpp's spellings: -c, -np, -n (the default max_tokens), --opt=value
kvt_start_server main --host=127.0.0.1 -c 512 -np 2 -n 3 --cors-origin http://app.example
post /v1/completions '{"prompt":"count with me","ignore_eos":true,"temperature":0}'
check "-n sets the default max_tokens" is "$(jb .usage.completion_tokens)" 3
# ---- /tokenize and /detokenize ------------------------------------------------------------
post /tokenize '{"content":"Hello world, hello cache"}'
check "tokenize 200" is "$CODE" 200
N=$(jb '.tokens | length')
check "tokenize gives ids" gt "$N" 2
check "tokenize ids are numbers" is "$(jb '[.tokens[] | type] | unique | join(",")')" number
IDS=$(jq -c .tokens "$TMP/body")
post /detokenize "{\"tokens\":$IDS}"
check "detokenize 200" is "$CODE" 200
check "detokenize(tokenize(s)) == s" is "$(jb .content)" "Hello world, hello cache"
post /tokenize '{"content":"Hello world","with_pieces":true}'
check "with_pieces: objects" is "$(jb '.tokens[0] | keys | join(",")')" id,piece
check "with_pieces: pieces concatenate to the text" is "$(jb '[.tokens[].piece] | join("")' | sed 's/^ //')" "Hello world"
post /tokenize '{"content":"Hello","add_special":true}'
ADD=$(jb '.tokens | length')
post /tokenize '{"content":"Hello"}'
check "add_special adds the model's BOS" is "$ADD" "$(( $(jb '.tokens | length') + 1 ))"
post /tokenize '{"text":"x"}'
check "tokenize without content is 400" is "$CODE" 400
check "the 400 names content" is "$(jb .error.param)" content
post /detokenize '{"tokens":[1,99999999]}'
check "detokenize of a bad id is 400" is "$CODE" 400
get -X GET "$URL/tokenize"
check "GET /tokenize is 405" is "$CODE" 405

# ---- /props and /v1/models ------------------------------------------------------------------------
get "$URL/props"
check "props 200" is "$CODE" 200
check "props n_ctx" is "$(jb .n_ctx)" 512
check "props block size" gt "$(jb .block_size)" 0
check "props chat template family" is "$(jb .chat_template_family)" chatml
check "props kv dtype" is "$(jb .kv_dtype)" f16
check "props T0 budget" gt "$(jb .tiers.T0.budget_bytes)" 0
check "props T1 off" is "$(jb .tiers.T1.enabled)" false
check "props slots" is "$(jb .total_slots)" 2
get "$URL/v1/models"
check "models context_length" is "$(jb '.data[0].context_length')" 512
check "models meta n_ctx" is "$(jb '.data[0].meta.n_ctx')" 512
check "models meta n_vocab" gt "$(jb '.data[0].meta.n_vocab')" 0
check "models meta n_params" gt "$(jb '.data[0].meta.n_params')" 0
ID=$(jb '.data[0].id')
# a model's created is when it was made, the same on every call: poll until the clock passes it, then ask again
CREATED=$(jb '.data[0].created')
for _ in $(seq 100); do [ "$(date +%s)" -gt "$CREATED" ] && break; sleep 0.05; done
get "$URL/v1/models"
check "models created is the same on a later call" is "$(jb '.data[0].created')" "$CREATED"
get "$URL/v1/models/$ID"
check "... and on the retrieve" is "$(jb '.created')" "$CREATED"
# OpenAI's retrieve (the SDKs' models.retrieve): the model's object by any name it answers to
get "$URL/v1/models/$ID"
check "GET /v1/models/{id} 200" is "$CODE" 200
check "the model's object" is "$(jb '[.object, .id, .owned_by, (.created | type), .context_length] | join(",")')" \
  "model,$ID,kvtier,number,512"
get "$URL/v1/models/m.gguf"
check "the file's name retrieves it too" is "$(jb '[.object, .id] | join(",")')" "model,$ID"
get "$URL/v1/models/gpt-4o"
check "another model is 404" is "$CODE" 404
check "its code is model_not_found" is "$(jb '[.error.code, .error.param] | join(",")')" model_not_found,model
get -X POST "$URL/v1/models/$ID"
check "POST /v1/models/{id} is 405" is "$CODE" 405
# a trailing '/' or a doubled one (a base URL that ends in '/') reaches the route, as behind nginx
get "$URL/v1/models/"
check "GET /v1/models/ is /v1/models" is "$CODE/$(jb '.data[0].id')" "200/$ID"
get "$URL//v1//models/$ID/"
check "GET //v1//models/{id}/ is the retrieve" is "$CODE/$(jb .id)" "200/$ID"
post /v1/chat/completions/ '{"messages":[{"role":"user","content":"x"}],"max_tokens":1}'
check "POST /v1/chat/completions/ is a chat" is "$CODE/$(jb .object)" 200/chat.completion

# ---- CORS --------------------------------------------------------------------------------------
H=$(curl -s -m 10 -D - -o /dev/null -X OPTIONS -H 'Origin: http://app.example' \
  -H 'Access-Control-Request-Method: POST' -H 'Access-Control-Request-Headers: content-type, authorization' \
  "$URL/v1/chat/completions" | tr -d '\r')
check "preflight 204" grep -q '^HTTP/1.1 204' <<<"$H"
check "preflight allows the origin" grep -qi '^Access-Control-Allow-Origin: http://app.example$' <<<"$H"
check "preflight allows POST" grep -qi '^Access-Control-Allow-Methods: .*POST' <<<"$H"
check "preflight allows the headers asked" grep -qi '^Access-Control-Allow-Headers: content-type, authorization' <<<"$H"
H=$(curl -s -m 10 -D - -o /dev/null -X OPTIONS -H 'Origin: http://app.example' \
  -H 'Access-Control-Request-Method: DELETE' "$URL/v1/responses/resp_x" | tr -d '\r')
check "preflight allows DELETE (a browser forgets a stored response)" \
  grep -qi '^Access-Control-Allow-Methods: .*DELETE' <<<"$H"
H=$(curl -s -m 10 -D - -o /dev/null -X OPTIONS -H 'Origin: http://evil.example' "$URL/v1/models" | tr -d '\r')
check "another origin gets no Allow-Origin" bash -c "! grep -qi '^Access-Control-Allow-Origin' <<<\"\$1\"" _ "$H"
H=$(curl -s -m 10 -D - -o /dev/null -H 'Origin: http://app.example' "$URL/v1/models" | tr -d '\r')
check "a response carries Allow-Origin" grep -qi '^Access-Control-Allow-Origin: http://app.example$' <<<"$H"
kvt_stop_server main

kvt_start_server plain --host localhost --ctx 256
check "localhost binds 127.0.0.1" grep -q 'listening on http://127.0.0.1:' "$TMP/plain.log"
get -X OPTIONS "$URL/v1/models"
check "OPTIONS without --cors-origin is 405" is "$CODE" 405
kvt_stop_server plain

# ---- IPv6 ------------------------------------------------------------------------------------------
# ::1 is configured when /proc/net/if_inet6 lists 0000...0001
if grep -q '^0\{31\}1 ' /proc/net/if_inet6 2>/dev/null; then
  for h in ::1 '[::1]'; do
    kvt_start_server v6 --host "$h" --ctx 256
    check "--host $h listens on [::1]" grep -q 'listening on http://\[::1\]:' "$TMP/v6.log"
    get -g "$URL/health"
    check "--host $h answers over IPv6" is "$CODE" 200
    kvt_stop_server v6
  done
else
  echo "NOTE: no IPv6 loopback here; the [::1] checks are skipped"
fi
"$BIN" serve -m "$TMP/m.gguf" --host no-such-host.invalid --port 0 -t 1 >"$TMP/badhost.log" 2>&1
check "an unresolvable --host fails" is "$?" 1

# ---- the ChatML fallback keeps a chat's earlier turns cached -----------------------------------------
# A SentencePiece vocabulary without <|im_start|>: the ChatML markup is plain text there, and the
# generation header must tokenize as it does once it is history, or turn 3 recomputes turn 2's reply.
SPM=${KVT_SHARED:-../shared}/vocab/ggml-vocab-llama-spm.gguf
if [ ! -f "$SPM" ]; then
  kvt_test_skip_part "$SPM is missing: the ChatML fallback check did not run"
elif "$BIN" mkmodel -o "$TMP/spm.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 \
    --vocab-from "$SPM" >/dev/null 2>&1; then
  kvt_start_server spm -m "$TMP/spm.gguf" --ctx 1024
  get "$URL/props"
  B=$(jb .block_size)
  check "the spm model has no ChatML tokens: chatml fallback" is "$(jb .chat_template_family)" chatml
  U1="You are a careful assistant. Please tell me a long story about a cache that remembered every block it saw."
  chat() { post /v1/chat/completions "{\"messages\":$1,\"max_tokens\":24,\"temperature\":0}"; }
  M1=$(jq -cn --arg u "$U1" '[{role:"user",content:$u}]')
  chat "$M1"; R1=$(jb '.choices[0].message.content')
  M2=$(jq -cn --arg u "$U1" --arg r "$R1" '[{role:"user",content:$u},{role:"assistant",content:$r},{role:"user",content:"And then what happened next in that story?"}]')
  chat "$M2"; R2=$(jb '.choices[0].message.content'); P2=$(jb .usage.prompt_tokens); C2=$(jb .usage.completion_tokens)
  M3=$(jq -cn --argjson m "$M2" --arg r "$R2" '$m + [{role:"assistant",content:$r},{role:"user",content:"Finish it."}]')
  chat "$M3"
  # turn 2's sequence held its prompt and all but its last sampled token
  WANT=$(( (P2 + C2 - 1) / B * B ))
  check "turn 3 reuses turn 2's prompt and reply blocks ($WANT tokens)" ge "$(jb .usage.prompt_tokens_details.cached_tokens)" "$WANT"
  kvt_stop_server spm
else
  bad "mkmodel --vocab-from $SPM failed: the ChatML fallback check did not run"
fi

# ---- logprobs: computed from the logits the sampler sees, checked against kvtier eval -----------------
kvt_start_server lp --ctx 256
PIDS_TXT=$("$BIN" eval -m "$TMP/m.gguf" "The quick brown fox jumps" -n 6 2>/dev/null)
PROMPT=$(jq -c .prompt_tokens <<<"$PIDS_TXT")
GREEDY=$(jq -c .greedy <<<"$PIDS_TXT")
# the logits at each generated position: eval over the prompt and all but the last greedy token
ALL=$(jq -rn --argjson p "$PROMPT" --argjson g "$GREEDY" '$p + $g[:-1] | map(tostring) | join(" ")')
"$BIN" eval -m "$TMP/m.gguf" --tokens "$ALL" -n 1 2>/dev/null >"$TMP/eval.json"
post /v1/completions "{\"prompt\":$PROMPT,\"max_tokens\":6,\"temperature\":0,\"ignore_eos\":true,\"logprobs\":5}"
cp "$TMP/body" "$TMP/lp.json"
post /detokenize "{\"tokens\":$GREEDY}"
check "greedy completion follows eval's greedy tokens" is "$(jq -r '.choices[0].text' "$TMP/lp.json")" "$(jb .content)"
check "logprobs has one entry per token" is "$(jq '.choices[0].logprobs.token_logprobs | length' "$TMP/lp.json")" 6
# log-softmax differences are logit differences: chosen - k-th most likely == eval's top-1 - top-k
check "logprobs agree with eval's logits within 1e-4" python3 - "$TMP/lp.json" "$TMP/eval.json" "$(jq length <<<"$PROMPT")" <<'PY'
import json, sys
keep_all = lambda pairs: pairs  # the legacy top_logprobs maps text to logprob; equal texts must not collapse
lp = json.load(open(sys.argv[1]), object_pairs_hook=keep_all)
lp = dict(lp)["choices"][0]
lp = dict(dict(lp)["logprobs"])
ev = json.load(open(sys.argv[2]))["prompt_logits_top5"]
n_prompt = int(sys.argv[3])
bad = 0 if len(lp["token_logprobs"]) == 6 and len(ev) == n_prompt + 5 else 1
for j, (chosen, top) in enumerate(zip(lp["token_logprobs"], lp["top_logprobs"])):
    logits = [l for _, l in ev[n_prompt - 1 + j]]
    vals = sorted((v for _, v in top), reverse=True)
    if len(vals) != 5 or abs(vals[0] - chosen) > 1e-9 or chosen > 0:
        bad += 1
    for k in range(1, 5):
        if abs((chosen - vals[k]) - (logits[0] - logits[k])) > 1e-4:
            print("position", j, "k", k, chosen - vals[k], logits[0] - logits[k]); bad += 1
sys.exit(1 if bad else 0)
PY
# chat: OpenAI's shape, streamed and not, the same numbers
BODY='{"messages":[{"role":"user","content":"hi there"}],"max_tokens":5,"temperature":0,"ignore_eos":true,"logprobs":true,"top_logprobs":3}'
post /v1/chat/completions "$BODY"
check "chat logprobs.content per token" is "$(jb '.choices[0].logprobs.content | length')" 5
check "chat top_logprobs has 3" is "$(jb '[.choices[0].logprobs.content[].top_logprobs | length] | unique | join(",")')" 3
check "chat entries carry bytes" is "$(jb '.choices[0].logprobs.content[0] | has("bytes")')" true
# the fields OpenAI's schema requires of a chat response's message: role, content and refusal (null)
check "the message has role, content and refusal: null" is \
  "$(jb -c '.choices[0].message | [.role, (.content | type), has("refusal"), .refusal]')" '["assistant","string",true,null]'
NS=$(jb -c '[.choices[0].logprobs.content[].logprob]')
curl -s -m 60 -N -H 'Content-Type: application/json' -d "${BODY%\}},\"stream\":true}" "$URL/v1/chat/completions" >"$TMP/sse"
ST=$(grep '^data: {' "$TMP/sse" | sed 's/^data: //' | jq -c '.choices[0].logprobs.content // [] | .[].logprob' | jq -sc .)
check "streamed chat logprobs equal the non-streamed ones" is "$ST" "$NS"
post /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"top_logprobs":2}'
check "top_logprobs without logprobs is 400" is "$CODE" 400
post /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21}'
check "top_logprobs above 20 is 400" is "$CODE" 400
post /v1/completions '{"prompt":"x","max_tokens":1}'
check "no logprobs asked: null" is "$(jb '.choices[0].logprobs')" null
# a stop string the reply leaves out has no logprobs either, streamed or not: the entries' bytes spell
# the text exactly (a grammar writes a known text, with a character of several bytes before the stop)
G='"grammar":"root ::= \"Tea: wörld€ STOP after\"","stop":["STOP"]'
BODY="{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":60,\"logprobs\":true,$G}"
post /v1/chat/completions "$BODY"
check "chat with a stop string: the text before it" is "$(jb '.choices[0].message.content')" "Tea: wörld€ "
LPB='[.choices[0].logprobs.content[].bytes[]] | implode'
check "... and logprobs of that text only" is "$(jq -r "$LPB" "$TMP/body" | iconv -f utf-8 -t latin1)" "Tea: wörld€ "
curl -s -m 60 -N -H 'Content-Type: application/json' -d "${BODY%\}},\"stream\":true}" "$URL/v1/chat/completions" >"$TMP/sse"
check "... streamed too: no chunk's logprobs run ahead of the text" python3 - "$TMP/sse" <<'PY'
import json, sys
text, lp = b"", b""
for line in open(sys.argv[1], encoding="utf-8"):
    if not line.startswith("data: {"): continue
    for c in json.loads(line[6:])["choices"]:
        text += (c["delta"].get("content") or "").encode()
        lp += bytes(b for e in ((c.get("logprobs") or {}).get("content") or []) for b in e["bytes"])
        if not text.startswith(lp): sys.exit("logprobs ahead of the text: %r %r" % (lp, text))
sys.exit(0 if text == lp == "Tea: wörld€ ".encode() else "%r %r" % (text, lp))
PY
post /v1/completions "{\"prompt\":\"x\",\"max_tokens\":60,\"logprobs\":1,$G}"
check "completions with a stop string: a token per byte of the text" is \
  "$(jb '[.choices[0].text, (.choices[0].logprobs.tokens | length | tostring)] | join("|")')" "Tea: wörld€ |15"
# text_offset counts characters, as a Python string indexes the text: a byte inside ö or € is at its character
OFFS='[0,1,2,3,4,5,6,6,7,8,9,10,10,10,11]'
check "... text_offset in characters" is "$(jb -c '.choices[0].logprobs.text_offset')" "$OFFS"
curl -s -m 60 -N -H 'Content-Type: application/json' -d "{\"prompt\":\"x\",\"max_tokens\":60,\"logprobs\":1,\"stream\":true,$G}" \
  "$URL/v1/completions" >"$TMP/sse"
check "... streamed the same" is "$(grep '^data: {' "$TMP/sse" | sed 's/^data: //' | jq -c '.choices[0].logprobs.text_offset // empty' | jq -sc add)" "$OFFS"
kvt_stop_server lp

# ---- the field audit: a field that would change the output is honoured or a 400 naming it -------------
kvt_start_server audit --ctx 256
BASE='"messages":[{"role":"user","content":"hello"}],"max_tokens":6,"temperature":0,"ignore_eos":true'
post /v1/chat/completions "{$BASE}"
REF=$(jb '.choices[0].message.content')
NEUTRAL='"user":"u1","metadata":{"a":"b"},"store":false,"service_tier":"auto","tools":[],"tool_choice":"none",
  "response_format":{"type":"text"},"presence_penalty":0,"frequency_penalty":0,"repeat_penalty":1,"min_p":0,
  "logit_bias":{},"modalities":["text"],"parallel_tool_calls":true,"reasoning_effort":null,"audio":null,"n":1'
post /v1/chat/completions "{$BASE,$NEUTRAL}"
check "neutral values are accepted" is "$CODE" 200
check "... and change nothing (greedy)" is "$(jb '.choices[0].message.content')" "$REF"
for f in '"tools":[{"type":"function","function":{"name":"f g"}}]' '"tool_choice":"required"' \
  '"response_format":{"type":"json_schema","json_schema":{"schema":{"type":"string","pattern":"(?=x)y"}}}' \
  '"reasoning_effort":"low"' '"audio":{"voice":"x"}' '"modalities":["text","audio"]' \
  '"functions":[{"name":"f"}]' '"function_call":"auto2"'; do
  post /v1/chat/completions "{$BASE,$f}"
  name=$(sed 's/^"\([a-z_]*\)".*/\1/' <<<"$f")
  check "$f is a 400" is "$CODE" 400
  check "... naming $name" is "$(jb .error.param)" "$name"
done
# vLLM's repetition_penalty is honoured: over the prompt and the reply, a positive logit divided by it
# (its arithmetic is test_sampler's); it reaches the sampler on every route, and a reply repeats
post /v1/chat/completions "{$BASE,\"repetition_penalty\":5}"
REP=$(jb '.choices[0].message.content')
post /v1/chat/completions "{$BASE,\"repetition_penalty\":5}"
check "repetition_penalty 5: accepted, and greedy replies repeat" is "$CODE/$(jb '.choices[0].message.content')" "200/$REP"
post /completion '{"prompt":"hi","n_predict":1,"repetition_penalty":1.25}'
check "... /completion's generation_settings says it" is "$CODE/$(jb .generation_settings.repetition_penalty)" 200/1.25
post /v1/completions '{"prompt":"hi","max_tokens":1,"repetition_penalty":1.25}'
check "... /v1/completions takes it" is "$CODE" 200
# a greedy reply of this model that loops over a few tokens breaks out of the loop under it
LOOP='"prompt":"eieofgogteltlgttz eieofgogteltlgttz","n_predict":40,"temperature":0,"ignore_eos":true,"return_tokens":true'
post /completion "{$LOOP}"
U0=$(jb '.tokens | unique | length')
post /completion "{$LOOP,\"repetition_penalty\":1.5}"
U1=$(jb '.tokens | unique | length')
check "... the greedy reply loops ($U0 distinct ids of 40), under repetition_penalty 1.5 less ($U1)" test "$U0" -lt 30 -a "$U1" -gt "$U0"
for bad in 0 -1 11 '"x"'; do
  post /v1/chat/completions "{$BASE,\"repetition_penalty\":$bad}"
  check "repetition_penalty $bad is a 400 naming it" is "$CODE/$(jb .error.param)" 400/repetition_penalty
done
# vLLM's and other servers' sampling and structured-output fields that kvtier lacks: their neutral
# values are accepted and change nothing, any other is a 400 naming the field
post /v1/chat/completions "{$BASE,\"repetition_penalty\":1,\"min_tokens\":0,\"stop_token_ids\":[],
  \"include_stop_str_in_output\":false,\"continue_final_message\":false,\"use_beam_search\":false,\"top_a\":0,
  \"guided_json\":null,\"guided_regex\":null,\"guided_choice\":null,\"guided_grammar\":null}"
check "vLLM's fields at their neutral values are accepted" is "$CODE" 200
check "... and change nothing (greedy)" is "$(jb '.choices[0].message.content')" "$REF"
for f in '"min_tokens":4' '"stop_token_ids":[5]' '"include_stop_str_in_output":true' \
  '"continue_final_message":true' '"use_beam_search":true' '"top_a":0.5' '"guided_json":{"type":"object"}' \
  '"guided_regex":"a+"' '"guided_choice":["yes","no"]' '"guided_grammar":"root ::= \"a\""' \
  '"structured_outputs":{"choice":["a"]}'; do
  name=$(sed 's/^"\([a-z_]*\)".*/\1/' <<<"$f")
  for route in /v1/chat/completions /v1/completions /completion; do
    [ "$route" = /v1/chat/completions ] && body="{$BASE,$f}" || body="{\"prompt\":\"hi\",\"max_tokens\":2,$f}"
    post "$route" "$body"
    check "$route $f is a 400 naming it" is "$CODE/$(jb .error.param)/$(jb .error.code)" "400/$name/unsupported_parameter"
  done
done
post /v1/chat/completions "{$BASE,\"guided_json\":{}}"
check "guided_json's 400 says what to use" is "$(jb .error.message | grep -c 'send null (use response_format)$')" 1
# a field whose only neutral value is null says so once, and one with another neutral value names it
post /v1/chat/completions "{$BASE,\"reasoning_effort\":\"low\"}"
check "reasoning_effort's 400 says: send null" is "$(jb .error.message | grep -c 'leave it out or send null$')" 1
post /v1/chat/completions "{$BASE,\"modalities\":[\"audio\"]}"
check "modalities' 400 names its neutral value" is "$(jb .error.message | grep -c 'or send null or \[\"text\"\]$')" 1
# stream_options asks for something of a stream: without stream: true it is a mistake, refused as OpenAI does
post /v1/chat/completions "{$BASE,\"stream_options\":{\"include_usage\":true}}"
check "stream_options without stream is a 400 naming it" is "$CODE/$(jb .error.param)" 400/stream_options
post /v1/completions '{"prompt":"hi","max_tokens":1,"stream":false,"stream_options":{}}'
check "... on completions too" is "$CODE/$(jb .error.param)" 400/stream_options
post /v1/chat/completions "{$BASE,\"stream\":false,\"stream_options\":null}"
check "... and stream_options null is fine" is "$CODE" 200
# echo is supported, but not streamed
for f in '"echo":true,"stream":true' '"best_of":3'; do
  post /v1/completions "{\"prompt\":\"hi\",$f}"
  name=$(sed 's/^"\([a-z_]*\)".*/\1/' <<<"$f")
  check "completions $f is a 400 naming it" is "$CODE/$(jb .error.param)" "400/$name"
done
post /v1/completions '{"prompt":"hi","suffix":"end"}'
check "completions' suffix on a model without fill-in-the-middle tokens: 501" is "$CODE" 501
post /v1/chat/completions "{$BASE,\"suffix\":\"end\"}"
check "... chat's: a 400 naming it" is "$CODE/$(jb .error.param)" 400/suffix
post /v1/completions '{"prompt":"hi","n_predict":4,"ignore_eos":true}'
check "llama.cpp's n_predict is max_tokens" is "$(jb .usage.completion_tokens)" 4
# the penalties, min_p and logit_bias are honoured
for f in '"presence_penalty":0.5' '"frequency_penalty":1' '"repeat_penalty":1.1' '"min_p":0.05' '"penalty_last_n":8'; do
  post /v1/chat/completions "{$BASE,$f}"
  check "$f is honoured (200)" is "$CODE" 200
done
G0=$(jq '.[0]' <<<"$GREEDY")
post /v1/completions "{\"prompt\":$PROMPT,\"max_tokens\":1,\"temperature\":0}"
FIRST=$(jb '.choices[0].text')
post /detokenize "{\"tokens\":[$G0]}"
check "greedy's first token is eval's" is "$FIRST" "$(jb .content)"
post /v1/completions "{\"prompt\":$PROMPT,\"max_tokens\":1,\"temperature\":0,\"logit_bias\":{\"$G0\":-100}}"
check "logit_bias -100 bans greedy's first token" bash -c '[ "$1" != "$2" ]' _ "$(jb '.choices[0].text')" "$FIRST"
post /v1/completions "{\"prompt\":$PROMPT,\"max_tokens\":1,\"logit_bias\":{\"-3\":1}}"
check "a bad logit_bias id is a 400 naming it" is "$CODE/$(jb .error.param)" 400/logit_bias
post /v1/chat/completions "{$BASE,\"presence_penalty\":3}"
check "presence_penalty past 2 is a 400" is "$CODE" 400
# each message carries what its role needs (OpenAI's rules); the 400 names the field and its index
U='{"role":"user","content":"q"}'
for m in '[{"role":"user"}]|messages[0].content' "[$U,{\"role\":\"tool\",\"content\":\"5\"}]|messages[1].tool_call_id" \
  "[$U,{\"role\":\"assistant\",\"content\":null}]|messages[1].content" "[$U,{\"role\":\"robot\",\"content\":\"x\"}]|messages[1].role"; do
  post /v1/chat/completions "{\"messages\":${m%|*},\"max_tokens\":1}"
  check "messages ${m%|*} is a 400 naming ${m#*|}" is "$CODE/$(jb .error.param)" "400/${m#*|}"
  check "... and its message says which message" grep -qF "${m#*|}" "$TMP/body"
done
kvt_stop_server audit

kvt_test_done test_server_agentapi
