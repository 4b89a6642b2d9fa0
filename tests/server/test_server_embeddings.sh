#!/usr/bin/env bash
# Embeddings with --embeddings: POST /v1/embeddings (OpenAI's shape) and
# /embedding (llama-server's). Each vector has n_embd floats and L2 norm 1;
# base64 is the same floats' little-endian bytes; the same input twice gives
# the same bits, the second time from cached KV (last-token pooling); a batch
# of inputs gives each input's own vector bit for bit; an input of strings and
# token ids (llama-server's mixed form) is one input; mean and last pooling
# differ; an embedding that went back to the queue for want of KV pages gives
# the vector it gets alone; without --embeddings the routes are a 404 naming
# the flag, and bad fields are 400s naming the field. Needs curl, jq and python3.
set -u
command -v curl >/dev/null && command -v jq >/dev/null && command -v python3 >/dev/null ||
  { echo "SKIP: needs curl, jq and python3"; exit 77; }
. "$(dirname "$0")/../testutil.sh"

"$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 >/dev/null 2>&1 ||
  { echo "mkmodel failed"; exit 1; }
KVT_SERVE_ARGS=(-m "$TMP/m.gguf" --host 127.0.0.1 -t 1 --ctx 1024)
A="The quick brown fox jumps over the lazy dog while the cache keeps every block it has seen before."
B="A second text, different from the first, about tiered caches of keys and values."

# vecs FILE: each data[i].embedding as hex of its float32 bits, one line per input (base64 decoded)
vecs() {
  python3 - "$1" <<'PY'
import base64, json, struct, sys
d = json.load(open(sys.argv[1]))
for e in d["data"]:
    v = e["embedding"]
    b = base64.b64decode(v) if isinstance(v, str) else struct.pack("<%df" % len(v), *v)
    print(b.hex())
PY
}
# norms FILE: "n_floats norm" per input
norms() {
  python3 - "$1" <<'PY'
import json, math, sys
for e in json.load(open(sys.argv[1]))["data"]:
    v = e["embedding"]
    print(len(v), "%.4f" % math.sqrt(sum(x * x for x in v)))
PY
}

# ---- off by default ------------------------------------------------------------------------------
kvt_start_server off
post /v1/embeddings "{\"input\": \"$A\"}"
check "without --embeddings: 404" is "$CODE" 404
check "... naming the flag" bash -c "jq -r .error.message '$TMP/body' | grep -q -- --embeddings"
post /embedding "{\"content\": \"$A\"}"
check "/embedding too" is "$CODE" 404
kvt_stop_server off

# ---- last-token pooling: cached prefixes are reused ----------------------------------------------
kvt_start_server last --embeddings --pooling last --api-key k1
AUTH=(-H 'Authorization: Bearer k1')
post /v1/embeddings "{\"input\": \"$A\"}"
check "the API key guards /v1/embeddings" is "$CODE" 401
post /v1/embeddings "{\"input\": \"$A\", \"model\": \"m\"}" "${AUTH[@]}"
check "/v1/embeddings answers" is "$CODE" 200
cp "$TMP/body" "$TMP/a1.json"
check "... object list, one embedding at index 0" is "$(jb -c '[.object, .data[0].object, .data[0].index, (.data | length)]')" \
  '["list","embedding",0,1]'
check "... 64 floats (n_embd), L2 norm 1" is "$(norms "$TMP/a1.json")" "64 1.0000"
check "... usage: prompt_tokens = total_tokens > 10" bash -c "[ $(jb .usage.prompt_tokens) -gt 10 ] && [ $(jb .usage.prompt_tokens) = $(jb .usage.total_tokens) ]"
check "... cold: nothing cached" is "$(jb .kvtier.cached_tokens)" 0
post /v1/embeddings "{\"input\": \"$A\", \"encoding_format\": \"base64\"}" "${AUTH[@]}"
cp "$TMP/body" "$TMP/a2.json"
check "base64 answers with a string" is "$(jb '.data[0].embedding | type')" string
check "... warm: the prompt's blocks come from the cache" gt "$(jb .kvtier.cached_tokens)" 0
check "... the same bits as the float answer, warm or cold" is "$(vecs "$TMP/a2.json")" "$(vecs "$TMP/a1.json")"
post /v1/embeddings "{\"input\": \"$B\"}" "${AUTH[@]}"
cp "$TMP/body" "$TMP/b1.json"
check "another input, another vector" bash -c "[ '$(vecs "$TMP/b1.json")' != '$(vecs "$TMP/a1.json")' ]"
post /v1/embeddings "{\"input\": [\"$A\", \"$B\", \"$A\"]}" "${AUTH[@]}"
cp "$TMP/body" "$TMP/batch.json"
check "a batch answers in input order" is "$(jb -c '[.data[].index]')" '[0,1,2]'
check "... each vector equals its single-input one, bit for bit" is "$(vecs "$TMP/batch.json")" \
  "$(printf '%s\n%s\n%s' "$(vecs "$TMP/a1.json")" "$(vecs "$TMP/b1.json")" "$(vecs "$TMP/a1.json")")"
IDS=$(curl -s -m 30 "${AUTH[@]}" -H 'Content-Type: application/json' -d "{\"content\": \"$A\", \"add_special\": true}" "$URL/tokenize" | jq -c .tokens)
post /v1/embeddings "{\"input\": $IDS}" "${AUTH[@]}"
cp "$TMP/body" "$TMP/ids.json"
check "token ids embed as their text does" is "$(vecs "$TMP/ids.json")" "$(vecs "$TMP/a1.json")"
post /v1/embeddings "{\"input\": [$IDS, $IDS]}" "${AUTH[@]}"
check "... and arrays of them" is "$(jb '.data | length')" 2
# llama-server's mixed input: strings and token ids in one array are ONE input, each string
# tokenized in place (no special tokens after an id)
T_B=$(curl -s -m 30 "${AUTH[@]}" -H 'Content-Type: application/json' -d "{\"content\": \"$B\"}" "$URL/tokenize" | jq -c .tokens)
post /v1/embeddings "{\"input\": $(jq -c '. + $b' --argjson b "$T_B" <<<"$IDS")}" "${AUTH[@]}"
cp "$TMP/body" "$TMP/idsb.json"
post /v1/embeddings "{\"input\": [$(jq -c '.[]' <<<"$IDS" | paste -sd,), \"$B\"]}" "${AUTH[@]}"
check "token ids then a text are one input" is "$CODE/$(jb '.data | length')" 200/1
check "... embedding as the same tokens given as ids do" is "$(vecs "$TMP/body")" "$(vecs "$TMP/idsb.json")"
post /v1/embeddings "{\"input\": [[$(jq -c '.[]' <<<"$IDS" | paste -sd,), \"$B\"], \"$A\"]}" "${AUTH[@]}"
check "... also among several inputs" is "$CODE/$(jb '.data | length')" 200/2
post /embedding "{\"content\": \"$A\"}" "${AUTH[@]}"
check "/embedding answers" is "$CODE" 200
check "... llama-server's shape: [{index, embedding: [[floats]]}]" is "$(jb -c '[.[0].index, (.[0].embedding | length), (.[0].embedding[0] | length)]')" '[0,1,64]'
check "... the same vector" is "$(python3 -c "import json,struct,sys; print(struct.pack('<64f', *json.load(open('$TMP/body'))[0]['embedding'][0]).hex())")" \
  "$(vecs "$TMP/a1.json")"

# ---- bad requests name the field -----------------------------------------------------------------
post /v1/embeddings '{"input": 5}' "${AUTH[@]}"
check "input a number: 400 naming input" is "$CODE,$(jb .error.param)" "400,input"
post /v1/embeddings '{"input": [1, "x", null]}' "${AUTH[@]}"
check "a null in an input of strings and token ids: 400 naming input[2]" is "$CODE,$(jb .error.param)" "400,input[2]"
post /v1/embeddings '{"input": [[1, "x", 2.5], "y"]}' "${AUTH[@]}"
check "a float among several inputs: 400 naming input[0][2]" is "$CODE,$(jb .error.message | cut -d' ' -f1)" \
  "400,input[0][2]"
post /v1/embeddings '{"input": ""}' "${AUTH[@]}"
check "an empty input: 400 naming input" is "$CODE,$(jb .error.param)" "400,input"
post /v1/embeddings '{"input": [99999999]}' "${AUTH[@]}"
check "a token id outside the vocabulary: 400 naming input" is "$CODE,$(jb .error.param)" "400,input"
post /v1/embeddings "{\"input\": \"$A\", \"dimensions\": 32}" "${AUTH[@]}"
check "dimensions other than n_embd: 400 naming dimensions" is "$CODE,$(jb .error.param)" "400,dimensions"
post /v1/embeddings "{\"input\": \"$A\", \"dimensions\": 64}" "${AUTH[@]}"
check "dimensions = n_embd is fine" is "$CODE" 200
post /v1/embeddings "{\"input\": \"$A\", \"encoding_format\": \"hex\"}" "${AUTH[@]}"
check "encoding_format hex: 400 naming it" is "$CODE,$(jb .error.param)" "400,encoding_format"
post /v1/embeddings '{"model": "m"}' "${AUTH[@]}"
check "no input: 400 naming input" is "$CODE,$(jb .error.param)" "400,input"
# the model names the served one, as on every other route: another is a 404, the served one's names are fine
post /v1/embeddings "{\"input\": \"$A\", \"model\": \"text-embedding-3-small\"}" "${AUTH[@]}"
check "another model: 404 model_not_found" is "$CODE,$(jb .error.code),$(jb .error.param)" "404,model_not_found,model"
for name in m m.gguf ""; do
  post /v1/embeddings "{\"input\": \"$A\", \"model\": \"$name\"}" "${AUTH[@]}"
  check "model '$name': 200" is "$CODE" 200
done
kvt_stop_server last

# ---- mean pooling --------------------------------------------------------------------------------
kvt_start_server mean --embeddings --pooling mean
post /v1/embeddings "{\"input\": \"$A\"}"
cp "$TMP/body" "$TMP/m1.json"
check "mean pooling: 64 floats, L2 norm 1" is "$(norms "$TMP/m1.json")" "64 1.0000"
check "... differs from last-token pooling" bash -c "[ '$(vecs "$TMP/m1.json")' != '$(vecs "$TMP/a1.json")' ]"
check "... reports its pooling" is "$(jb .kvtier.pooling)" mean
post /v1/embeddings "{\"input\": [\"$B\", \"$A\"]}"
check "... the same input again: the same bits" is "$(vecs "$TMP/body" | tail -n 1)" "$(vecs "$TMP/m1.json")"
kvt_stop_server mean

# ---- an embedding that gives way for want of KV pages -------------------------------------------
# A pool of 8 blocks of 32 and prefill chunks of one block: the embedding (~190 tokens) prefills
# beside three replies of 62 + 150 tokens, runs out of pages part-way, goes back to the queue and
# runs again once a reply ends; its sum starts again with it, so the vector is the one alone.
kvt_start_server tight --embeddings --pooling mean -c 512 --kv-active 64K --kv-ram 4M --prefill-chunk 32
E="{\"input\": \"$(printf 'embedding text about tiers and pages %.0s' 1 2 3 4 5)\"}"
post /v1/embeddings "$E"
alone=$(vecs "$TMP/body")
differ=0 requeued=0
for round in 1 2 3; do
  pids=()
  for i in 1 2 3; do
    curl -s -m 120 -o /dev/null -H 'Content-Type: application/json' "$URL/v1/completions" -d \
      "{\"prompt\": \"client $i asks about tiers and pages and blocks and memory $i$i$i\", \"max_tokens\": 150, \"ignore_eos\": true}" &
    pids+=($!)
  done
  post /v1/embeddings "$E"
  wait "${pids[@]}"
  [ "$CODE" = 200 ] && [ "$(vecs "$TMP/body")" = "$alone" ] || differ=$((differ + 1))
done
requeued=$(grep -c '(embd-[0-9a-f]*) goes back to the queue' "$TMP/tight.log")
check "an embedding among replies in a small pool went back to the queue" gt "$requeued" 0
check "... and each time its vector is the one alone" is "$differ" 0
kvt_stop_server tight

check "--pooling max is a usage error" expect_rc 2 "$BIN" serve -m "$TMP/m.gguf" --embeddings --pooling max
check "... naming the values" grep -q 'mean, last or cls' "$TMP/out"

kvt_test_done test_server_embeddings
