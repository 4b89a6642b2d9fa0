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
  --top-p --metrics --metrics-names --slots --hf-repo --version --embedding -fa -cb -nocb -ctk -ctv -hf --min-p \
  --repeat-penalty --repeat-last-n --presence-penalty --frequency-penalty -s -dev -np -ngl -to; do
  check "serve --help explains $flag" grep -qe "$flag[ ,)]" "$TMP/help"
done
check "--help says attention is already fused" grep -q 'attention is always fused' "$TMP/help"
"$BIN" run --help >"$TMP/help" 2>&1
for flag in --min-p --repeat-penalty --repeat-last-n --presence-penalty --frequency-penalty -s --escape --no-escape \
  --no-conversation -no-cnv --version -dev --flash-attn -fa; do
  check "run --help explains $flag" grep -qe "$flag[ ,)]" "$TMP/help"
done

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
# llama.cpp's other several-letter flags are one option each, named as typed, never a cluster
# (-cnv was "-c nv", -no-cnv "-n o-cnv", -sys "-s ys"); an unknown llama.cpp flag says what to use
for f in -cnv -sys -st -sp -lv -kvu -cram -md -mli; do
  check "run $f is unknown, named as typed" expect_rc 2 "$BIN" run $f 1
  check "... not read as a cluster" grep -q "unknown option '$f' (llama.cpp's --" "$TMP/out"
done
check "serve -cram: what to use" expect_rc 2 "$BIN" serve -cram 1024
check "... --kv-ram" grep -q "unknown option '-cram' (llama.cpp's --cache-ram): .*--kv-ram BYTES" "$TMP/out"
check "serve -b: what to use" expect_rc 2 "$BIN" serve -b 512
check "... --prefill-chunk" grep -q "unknown option '-b' (llama.cpp's --batch-size): .*--prefill-chunk" "$TMP/out"
check "serve takes a model card's sampling line" expect_rc 0 "$BIN" serve --temp 0.7 --top-p 0.8 --top-k 20 \
  --min-p 0 --repeat-penalty 1.05 --presence-penalty 1.5 --frequency-penalty 0 --repeat-last-n 64 --help
check "serve --repeat-penalty is bounded as a request's" expect_rc 2 "$BIN" serve --repeat-penalty 11
check "run --log-disable: KVT_LOG" expect_rc 2 "$BIN" run --log-disable
check "... KVT_LOG=0" grep -q "KVT_LOG=0" "$TMP/out"
check "run -cnv: serve for chats" expect_rc 2 "$BIN" run -cnv
check "... chat completions" grep -q "kvtier serve and send /v1/chat/completions" "$TMP/out"
check "an unknown flag of no llama.cpp meaning has no hint" expect_rc 2 "$BIN" run --frobnicate
check "... just its name" is "$(cat "$TMP/out")" "kvtier run: unknown option '--frobnicate' (see kvtier run --help)"
check "-no-cnv is run's completion of -p, accepted" expect_rc 0 "$BIN" run -no-cnv --help
check "run --no-display-prompt, --no-warmup accepted" expect_rc 0 "$BIN" run --no-display-prompt --no-warmup --help
check "serve --no-warmup accepted" expect_rc 0 "$BIN" serve --no-warmup --help
check "-s is --seed (run)" expect_rc 2 "$BIN" run -s x
check "... checked as the seed" grep -q -- "-s must be an integer" "$TMP/out"
check "-s is --seed (serve)" expect_rc 0 "$BIN" serve -s 42 --help
check "run --version prints the version" expect_rc 0 "$BIN" run --version
check "... the same line" is "$(cat "$TMP/out")" "$VERSION"
check "-c 0 (llama.cpp's: the model's) is taken by run" expect_rc 0 "$BIN" run -c 0 --help
check "... and serve" expect_rc 0 "$BIN" serve -c 0 --help
check "serve -c 1 is still refused" expect_rc 2 "$BIN" serve -c 1
check "... naming 0 as well" grep -q "must be 0 (the model's) or at least 2" "$TMP/out"
check "-dev none (llama.cpp's: no GPU) is the CPU" expect_rc 0 "$BIN" run -dev none --help
check "run -ctk q8_0 alone says the values follow" expect_rc 0 "$BIN" run -m "$TMP/m.gguf" -p hi -n 1 -ctk q8_0
check "... naming the flag" grep -q "cache-type-k q8_0 sets the values' type too" "$TMP/out"
check "--kv-type q8_0 -ctk q8_0 say nothing of it" expect_rc 0 "$BIN" run -m "$TMP/m.gguf" -p hi -n 1 --kv-type q8_0 -ctk q8_0
check "... nothing" bash -c "! grep -q \"type too\" '$TMP/out'"
check "-ctk q8_0 -ctv q8_0 say nothing of it" expect_rc 0 "$BIN" run -m "$TMP/m.gguf" -p hi -n 1 -ctk q8_0 -ctv q8_0
check "... nothing" bash -c "! grep -q \"type too\" '$TMP/out'"
# -n -1 (llama.cpp's "no limit"): run generates to the end of the context, serve's default is the limit
filled() { sed -n 's/.*prompt \([0-9]*\) tokens.*generated \([0-9]*\) tokens.*/\1 \2/p' "$TMP/out" | awk '{print $1 + $2}'; }
check "run -fa, as serve takes it" expect_rc 0 "$BIN" run -m "$TMP/m.gguf" -p hi -n 1 -fa
check "run -fa off: a notice that attention stays fused" expect_rc 0 "$BIN" run -m "$TMP/m.gguf" -p hi -n 1 -fa off
check "... said" grep -q 'always fused' "$TMP/out"
check "run -fa with another value is refused" expect_rc 2 "$BIN" run -fa maybe -p hi
check "run -t -1 (llama.cpp's: all CPUs) runs" expect_rc 0 "$BIN" run -m "$TMP/m.gguf" -p hi -n 1 -t -1
for n in -1 -2; do
  check "run -n $n generates until the context is full" expect_rc 0 "$BIN" run -m "$TMP/m.gguf" -p hi -n $n -c 48 --ignore-eos
  check "... prompt and generated tokens fill its 48" is "$(filled)" 48
  check "... and the stats line says why it stopped" grep -q "stopped: the context is full" "$TMP/out"
done
# run's llama-cli sampling flags change the text, and each is honoured: greedy, 40 tokens
gen() { "$BIN" run -m "$TMP/m.gguf" -p "one two three" -n 40 --temp 0 "$@" 2>/dev/null; }
BASE=$(gen)
check "run --repeat-penalty changes greedy text" test "$(gen --repeat-penalty 1.8)" != "$BASE"
check "... --repeat-last-n 0 turns it off" is "$(gen --repeat-penalty 1.8 --repeat-last-n 0)" "$BASE"
check "... --frequency-penalty too" test "$(gen --frequency-penalty 2)" != "$BASE"
check "run --min-p changes sampled text" test "$(gen --temp 1.5 -s 3 --min-p 0.3)" != "$(gen --temp 1.5 -s 3)"
check "... --min-p 0 is off" is "$(gen --temp 1.5 -s 3 --min-p 0)" "$(gen --temp 1.5 -s 3)"
check "run --repeat-penalty is bounded" expect_rc 2 "$BIN" run --repeat-penalty 0
# -e reads llama-cli's escapes in -p: the prompt is the one with the characters themselves
check "run -e: \\n \\t \\x41 are the characters" is "$("$BIN" run -m "$TMP/m.gguf" -p 'x\ty\nz \x41' -e -n 12 --temp 0 2>/dev/null)" \
  "$("$BIN" run -m "$TMP/m.gguf" -p "$(printf 'x\ty\nz A')" -n 12 --temp 0 2>/dev/null)"
check "... --no-escape on the command line wins over \$KVTIER_ESCAPE" is \
  "$(KVTIER_ESCAPE=1 "$BIN" run -m "$TMP/m.gguf" -p 'x\ty\nz \x41' --no-escape -n 12 --temp 0 2>/dev/null)" \
  "$("$BIN" run -m "$TMP/m.gguf" -p 'x\ty\nz \x41' -n 12 --temp 0 2>/dev/null)"
check "... without -e, -p is taken as given" test "$("$BIN" run -m "$TMP/m.gguf" -p 'x\ty\nz \x41' -n 12 --temp 0 2>/dev/null)" != \
  "$("$BIN" run -m "$TMP/m.gguf" -p "$(printf 'x\ty\nz A')" -n 12 --temp 0 2>/dev/null)"

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

# ---- --api-key KEY,KEY: llama-server's list of keys ----------------------------------------------
check "--api-key , holds no key: a usage error" expect_rc 2 "$BIN" serve --api-key ,
check "... naming the flag" grep -q -- "--api-key needs a non-empty key" "$TMP/out"
kvt_start_server k --api-key k1,k2 --api-key k3
for key in k1 k2 k3; do
  post /v1/completions '{"prompt": "hi", "max_tokens": 1}' -H "Authorization: Bearer $key"
  check "--api-key k1,k2 --api-key k3: $key is a key" is "$CODE" 200
done
post /v1/completions '{"prompt": "hi", "max_tokens": 1}' -H "Authorization: Bearer k1,k2"
check "... the list itself is not" is "$CODE" 401
kvt_stop_server k

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
kvt_start_server n -n -1 -c 64
post /v1/completions '{"prompt": "Once upon a time", "ignore_eos": true}'
check "serve -n -1: a request without max_tokens fills the context" \
  is "$(jb '.usage.prompt_tokens + .usage.completion_tokens')" 64
kvt_stop_server n
# --min-p and the penalties: the defaults of requests that set none, field by field
long() { post /v1/completions "{\"prompt\": \"one two three\", \"max_tokens\": 40, \"ignore_eos\": true$1}"; jb '.choices[0].text'; }
kvt_start_server p --temp 0 --repeat-penalty 1.8
P=$(long '')
check "--repeat-penalty: a request without one is penalised" is "$P" "$(long ', "repeat_penalty": 1.8')"
check "... which changes greedy text" test "$P" != "$(long ', "repeat_penalty": 1')"
check "... a request's repeat_last_n 0 turns it off" is "$(long ', "repeat_last_n": 0')" "$(long ', "repeat_penalty": 1')"
kvt_stop_server p
kvt_start_server q --temp 1.5 --seed 5 --min-p 0.3 --repeat-last-n 0 --frequency-penalty 2
Q=$(long '')
check "--min-p: a request without one gets it" is "$Q" "$(long ', "min_p": 0.3')"
check "... which changes sampled text" test "$Q" != "$(long ', "min_p": 0')"
check "--repeat-last-n 0 turns the default penalties off" is "$Q" "$(long ', "frequency_penalty": 0')"
check "... and a request's own window turns its own on" test "$Q" != \
  "$(long ', "repeat_last_n": -1, "frequency_penalty": 2')"
kvt_stop_server q
kvt_start_server r --seed -1 --temp 1.5
check "--seed -1 is llama.cpp's random: requests without a seed differ" test "$(ask '')" != "$(ask '')"
kvt_stop_server r
check "run --seed -1 is the clock's seed, as the default" expect_rc 0 "$BIN" run -m "$TMP/m.gguf" -p hi -n 2 --seed -1

kvt_test_done test_cli_llama_flags
