#!/usr/bin/env bash
# llama-server's command lines carry over to kvtier serve: a long flag is its
# whole name or an error (never an abbreviation: --metrics --cont-batching
# leaves /metrics open), llama.cpp's several-letter flags (-cb, -fa, -ctk,
# -ctv, -nocb, -hf) are read as their long names and never as a cluster
# (-cb is not -c b), -fa takes an optional on/off/auto, -ctk and -ctv must
# agree, -hf is refused (no downloads), --temp/--top-k/--top-p/--seed are the
# defaults of requests that set none, --version prints the version, and every
# flag has a --help line. Needs curl and jq.
set -u
command -v curl >/dev/null && command -v jq >/dev/null || { echo "SKIP: needs curl and jq"; exit 77; }
. "${KVT_SRC:?KVT_SRC must point to the source tree}/tests/testutil.sh"

# heads of 32 dimensions: q8_0 KV needs them
"$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 2 --kv-heads 2 --ff 128 >/dev/null 2>&1 ||
  { echo "mkmodel failed"; exit 1; }
KVT_SERVE_ARGS=(-m "$TMP/m.gguf" --host 127.0.0.1 -t 1)

# ---- versions and help ---------------------------------------------------------------------------
VERSION=$("$BIN" --version)
check "kvtier --version prints the version" bash -c "[[ '$VERSION' =~ ^kvtier\ [0-9]+\.[0-9]+ ]]"
check "serve --version too, exit 0" expect_rc 0 "$BIN" serve --version
check "... the same line" is "$(cat "$TMP/out")" "$VERSION"
"$BIN" serve --help >"$TMP/help" 2>&1
for flag in --flash-attn --cont-batching --no-cont-batching --cache-type-k --cache-type-v --temp --seed --top-k \
  --top-p --metrics --metrics-names --slots --hf-repo --version --embedding -fa -cb -nocb -ctk -ctv -hf; do
  check "serve --help explains $flag" grep -qe "$flag[ ,)]" "$TMP/help"
done
check "--help says attention is already fused" grep -q 'attention is always fused' "$TMP/help"

# ---- whole names only ----------------------------------------------------------------------------
check "an abbreviated flag is unknown" expect_rc 2 "$BIN" serve --metr
check "... named as typed" grep -q "unknown option '--metr'" "$TMP/out"
check "--metrics-k is no --metrics-key" expect_rc 2 "$BIN" serve --metrics-k x
check "an abbreviation with =value too" expect_rc 2 "$BIN" serve --paral=2
check "... named as typed" grep -q "unknown option '--paral=2'" "$TMP/out"
check "a value that looks like a flag is a value" expect_rc 0 "$BIN" serve --alias --x --help
# -a/--alias: no empty name (the model would be listed as ""), and no more names than are kept
for v in , a, ,a a,,b ''; do
  check "--alias '$v' is a usage error" expect_rc 2 "$BIN" serve --alias "$v" --help
  check "... naming the empty name" grep -q "holds an empty name" "$TMP/out"
done
check "--alias with 15 names is a usage error" expect_rc 2 "$BIN" serve -a a,b,c,d,e,f,g,h,i,j,k,l,m,n,o --help
check "... saying how many it takes" grep -q "at most 14 names" "$TMP/out"
check "--alias with 14 names is taken" expect_rc 0 "$BIN" serve -a a,b,c,d,e,f,g,h,i,j,k,l,m,n --help
check "-cb is not -c b" expect_rc 0 "$BIN" serve -cb --help
check "run has no -cb: unknown, not -c b" expect_rc 2 "$BIN" run -cb
check "... named as typed" grep -q "unknown option '-cb'" "$TMP/out"
check "-tb 8 is unknown, not -t b" expect_rc 2 "$BIN" serve -tb 8
check "... named as typed" grep -q "unknown option '-tb'" "$TMP/out"
check "-to is --timeout" expect_rc 2 "$BIN" serve -to 0
check "... checked as --timeout" grep -q -- "--timeout must be an integer in \[1, 86400\]" "$TMP/out"
check "-fa alone" expect_rc 0 "$BIN" serve -fa --help
check "-fa on (llama.cpp's newer form)" expect_rc 0 "$BIN" serve -fa on --help
check "--flash-attn=auto" expect_rc 0 "$BIN" serve --flash-attn=auto --help
check "-fa with another value is refused" expect_rc 2 "$BIN" serve -fa maybe
check "... naming the values" grep -q "on, off or auto, got 'maybe'" "$TMP/out"
check "-nocb is accepted" expect_rc 0 "$BIN" serve -nocb --help
check "... saying batching stays on" grep -q 'continuous batching is always on' "$TMP/out"
check "-ctk and -ctv alike are accepted" expect_rc 0 "$BIN" serve -ctk q8_0 -ctv q8_0 --help
check "-ctk and -ctv that differ are refused" expect_rc 2 "$BIN" serve -ctk f16 -ctv q8_0
check "... saying K and V share one type" grep -q 'keeps keys and values in one type' "$TMP/out"
check "-ctk takes the KV types" expect_rc 2 "$BIN" serve -ctk q4_0
check "... naming them" grep -q 'must be f16, f32 or q8_0' "$TMP/out"
check "-hf is refused with a non-zero exit" expect_rc 2 "$BIN" serve -hf org/model-GGUF
check "... saying kvtier downloads nothing" grep -q 'downloads no models.*-m FILE' "$TMP/out"
check "--hf-repo too" expect_rc 2 "$BIN" serve --hf-repo org/model-GGUF
check "--temp is bounded as a request's" expect_rc 2 "$BIN" serve --temp 3
check "--top-p 0 is refused" expect_rc 2 "$BIN" serve --top-p 0

# ---- --metrics --cont-batching: both flags, /metrics open, -ctk sets the KV type, --embedding --------
kvt_start_server a --metrics --cont-batching -fa -ctk q8_0 -ctv q8_0 --slots --embedding
CODE=$(curl -s -m 10 -o "$TMP/metrics" -w '%{http_code}' "$URL/metrics")
check "--metrics --cont-batching leaves /metrics open" is "$CODE" 200
check "... and it is the metrics" grep -q '^kvtier_' "$TMP/metrics"
check "-ctk q8_0 -ctv q8_0 make the KV q8_0" grep -q 'KV q8_0' "${KVT_LOG[a]}"
CODE=$(curl -s -m 30 -o "$TMP/emb" -w '%{http_code}' -H 'Content-Type: application/json' -d '{"input": "hi"}' \
  "$URL/v1/embeddings")
check "--embedding (llama-server's name) serves /v1/embeddings" is "$CODE" 200
kvt_stop_server a

# ---- sampling defaults ---------------------------------------------------------------------------
ask() { post /v1/completions "{\"prompt\": \"Once upon a time\", \"max_tokens\": 12$1}"; jb '.choices[0].text'; }
kvt_start_server t --temp 0
check "--temp 0: a request without temperature is greedy" is "$(ask '')" "$(ask ', "temperature": 0')"
kvt_stop_server t
kvt_start_server s --seed 1234 --temp 1.5 --top-k 50 --top-p 0.95
A=$(ask '') B=$(ask '')
check "--seed: requests without a seed repeat" is "$A" "$B"
check "... with the seed given" is "$A" "$(ask ', "seed": 1234, "temperature": 1.5, "top_k": 50, "top_p": 0.95')"
check "a request's own settings win (greedy)" is "$(ask ', "temperature": 0')" \
  "$(ask ', "temperature": 0, "seed": 7, "top_k": 0, "top_p": 1')"
kvt_stop_server s
kvt_start_server r --seed -1 --temp 1.5
check "--seed -1 is llama.cpp's random: requests without a seed differ" test "$(ask '')" != "$(ask '')"
kvt_stop_server r
check "run --seed -1 is the clock's seed, as the default" expect_rc 0 "$BIN" run -m "$TMP/m.gguf" -p hi -n 2 --seed -1

kvt_test_done test_cli_llama_flags
