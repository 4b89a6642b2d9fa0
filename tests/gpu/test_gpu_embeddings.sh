#!/usr/bin/env bash
# Embeddings on the GPU engine (lavapipe here): its hidden rows pooled on the
# host as on the CPU. `kvtier serve --embeddings --device vulkan` with
# last-token pooling: 64 floats of L2 norm 1, within the printed bounds of the
# CPU server's vector for the same input (cosine, largest |difference|; the
# bounds are test_gpu_hidden's, which holds every row and the mean-pooled
# vector to the CPU's); the second answer reuses the prompt's cached KV and
# has the cold answer's bits, and so does the input in a batch. Dense RAG
# retrieval on that server embeds the question on the GPU against an index
# embedded on the CPU: a document's own text retrieves it first. `kvtier rag
# index --embed --device vulkan` (mean pooling) writes vectors a question
# embedded on the CPU finds, and --device without --embed is a usage error.
# The validation layer is on and no validation message may appear. Needs
# curl, jq and python3.
set -u
command -v curl >/dev/null && command -v jq >/dev/null && command -v python3 >/dev/null ||
  { echo "SKIP: needs curl, jq and python3"; exit 77; }
# no GPU test runs under ThreadSanitizer (lavapipe's own threads are not instrumented)
[ -n "${TSAN_OPTIONS:-}" ] && { echo "SKIP: not under ThreadSanitizer (no GPU test is)"; exit 77; }
. "${KVT_SRC:?KVT_SRC must point to the source tree}/tests/testutil.sh"
"$BIN" info --devices >"$TMP/devices" 2>&1 || { echo "SKIP: no Vulkan device: $(head -1 "$TMP/devices")"; exit 77; }
export KVT_VK_VALIDATION=1

"$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 --type f16 >/dev/null 2>&1 ||
  { echo "mkmodel failed"; exit 1; }
A="The quick brown fox jumps over the lazy dog while the cache keeps every block it has seen before."
B="A second text, different from the first, about tiered caches of keys and values."
mkdir -p "$TMP/docs"
echo "The lighthouse keeper climbs one hundred steps every evening to light the lamp." >"$TMP/docs/lamp.txt"
echo "Glaciers carve wide valleys as they creep downhill over thousands of years." >"$TMP/docs/ice.txt"
echo "A violin has four strings tuned in fifths and is played with a bow." >"$TMP/docs/violin.txt"
"$BIN" rag index -m "$TMP/m.gguf" --docs "$TMP/docs" -o "$TMP/e.idx" --embed --pooling last -t 1 >/dev/null 2>&1 ||
  { echo "rag index failed"; exit 1; }

# vecs FILE: each data[i].embedding as hex of its float32 bits, one line per input
vecs() {
  python3 - "$1" <<'PY'
import json, struct, sys
for e in json.load(open(sys.argv[1]))["data"]:
    print(struct.pack("<%df" % len(e["embedding"]), *e["embedding"]).hex())
PY
}
# compare CPU.json GPU.json: "n_floats norm cosine max_abs_diff" of the first vectors
compare() {
  python3 - "$1" "$2" <<'PY'
import json, math, sys
c, g = (json.load(open(p))["data"][0]["embedding"] for p in sys.argv[1:3])
print(len(g), "%.4f" % math.sqrt(sum(x * x for x in g)), "%.9f" % sum(a * b for a, b in zip(c, g)),
      "%.3g" % max(abs(a - b) for a, b in zip(c, g)))
PY
}
KVT_SERVE_ARGS=(-m "$TMP/m.gguf" --host 127.0.0.1 -t 1 --ctx 1024 --embeddings --pooling last)

kvt_start_server cpu
post /v1/embeddings "{\"input\": \"$A\"}"
cp "$TMP/body" "$TMP/c1.json"
check "CPU server: last-token pooling answers" is "$CODE" 200
kvt_stop_server cpu

# ---- the GPU server: embeddings and dense RAG retrieval ------------------------------------------
kvt_start_server gpu --device vulkan --rag-index "$TMP/e.idx" --rag-retrieve dense
check "the GPU server starts with --embeddings and --rag-retrieve dense" grep -q "engine runs on" "${KVT_LOG[gpu]}"
post /v1/embeddings "{\"input\": \"$A\"}"
cp "$TMP/body" "$TMP/g1.json"
check "GPU: /v1/embeddings answers, cold (nothing cached)" is "$CODE $(jb .kvtier.cached_tokens)" "200 0"
read -r n norm cos dmax <<<"$(compare "$TMP/c1.json" "$TMP/g1.json")"
echo "GPU against CPU, last-token pooling: cosine $cos, max |diff| $dmax over $n floats"
check "GPU: 64 floats, L2 norm 1" is "$n $norm" "64 1.0000"
check "GPU: cosine with the CPU's vector >= 0.9999 ($cos)" python3 -c "import sys; sys.exit(not $cos >= 0.9999)"
check "GPU: max |GPU - CPU| <= 0.005 ($dmax)" python3 -c "import sys; sys.exit(not $dmax <= 0.005)"
post /v1/embeddings "{\"input\": \"$A\"}"
check "GPU: warm, the prompt's blocks come from the cache" gt "$(jb .kvtier.cached_tokens)" 0
check "... the same bits warm as cold" is "$(vecs "$TMP/body")" "$(vecs "$TMP/g1.json")"
post /v1/embeddings "{\"input\": [\"$B\", \"$A\"]}"
check "... and in a batch" is "$(vecs "$TMP/body" | tail -n 1)" "$(vecs "$TMP/g1.json")"
post /v1/rag/chat/completions "$(jq -cn --arg q "$(cat "$TMP/docs/ice.txt")" \
  '{messages: [{role: "user", content: $q}], max_tokens: 2, temperature: 0, kvtier: {rag: {retrieve: "dense", k: 2, order: "score"}}}')"
check "GPU: dense RAG retrieval answers" is "$CODE" 200
check "... the document's own text first" is "$(jb '.kvtier.rag.chunks[0].doc')" ice.txt
check "... cosine near 1 against the CPU-embedded index" is "$(jb '.kvtier.rag.chunks[0].score > 0.999')" true
kvt_stop_server gpu

# ---- `rag index --embed --device vulkan` ----------------------------------------------------------
rc=0
"$BIN" rag index -m "$TMP/m.gguf" --docs "$TMP/docs" -o "$TMP/g.idx" --embed --pooling mean -t 1 --device vulkan \
  >"$TMP/gidx.out" 2>&1 || rc=$?
check "rag index --embed --device vulkan exits 0" is "$rc" 0
check "... no validation message" sh -c "! grep -q 'validation' '$TMP/gidx.out'"
"$BIN" rag query "$TMP/g.idx" "$(cat "$TMP/docs/violin.txt")" --retrieve dense -m "$TMP/m.gguf" -k 1 -t 1 --json \
  >"$TMP/body" 2>/dev/null
check "... a question embedded on the CPU finds its document first" is "$(jb '.chunks[0].doc')" violin.txt
check "... with cosine near 1" is "$(jb '.chunks[0].score > 0.999')" true
check "rag index --device without --embed is a usage error" \
  expect_rc 2 "$BIN" rag index -m "$TMP/m.gguf" --docs "$TMP/docs" -o "$TMP/x.idx" --device vulkan
check "... naming --device and --embed" grep -q -- '--device needs --embed' "$TMP/out"

check "no validation message in the GPU server's log" sh -c "! grep -q 'validation' '${KVT_LOG[gpu]}'"
kvt_test_done test_gpu_embeddings
