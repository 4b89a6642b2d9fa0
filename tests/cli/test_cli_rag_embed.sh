#!/usr/bin/env bash
# `kvtier rag index --embed` and `rag query --retrieve bm25|dense|hybrid` with
# generated random-weight models (their vectors prove the plumbing, not the quality):
# - the index stores a vector per chunk and says so, with the time embedding took; a
#   document's own text asked densely finds that document first (its vector is the
#   chunk's, cosine 1);
# - hybrid scores are reciprocal-rank sums: the best is at most 2 / (rrf-k + 1), and
#   --rrf-k changes them;
# - a question embedded with another model or pooling, dense retrieval on an index
#   built without --embed, and a missing model are refused naming what is wrong;
# - a truncated index is refused; a version 2 index (the fuzz corpus's) still loads;
# - `rag prewarm --retrieve dense|hybrid` picks its pairs as `rag query` ranks with the
#   same flags (a question whose terms match one chunk has no bm25 pair but a dense one),
#   reports the embedding time, and refuses what `rag query` refuses;
# - query reports embed_ms for dense and hybrid only;
# - --help explains the new flags.
# Needs jq.
set -u
command -v jq >/dev/null || { echo "SKIP: needs jq"; exit 77; }
. "$(dirname "$0")/../testutil.sh"
. "$(dirname "$0")/../ragdense.sh"
has() { case "$1" in *"$2"*) return 0 ;; esac; echo "  '$1' lacks '$2'" >&2; return 1; }
kvt_rag_dense_setup
expect_rc 0 "$BIN" rag index -m "$TMP/a.gguf" --docs "$TMP/docs" -o "$IDX" --embed -t 1
check "index --embed reports its vectors" has "$(cat "$TMP/out")" "vectors of 64 floats (mean pooling)"
check "  and the time embedding them took (embed_ms)" grep -Eq \
  "vectors of 64 floats \(mean pooling\), embedding the chunks took [0-9]+\.[0-9] ms, in " "$TMP/out"
q() { "$BIN" rag query "$IDX" "$@" -t 1 --json; }
top() { jq -r '.chunks[0].doc'; }
check "dense: a document's own text finds it" is \
  "$(q "$(cat "$TMP/docs/ice.txt")" --retrieve dense -m "$TMP/a.gguf" | top)" ice.txt
check "dense: its cosine is 1" is \
  "$(q "$(cat "$TMP/docs/violin.txt")" --retrieve dense -m "$TMP/a.gguf" | jq '.chunks[0].score > 0.99999')" true
check "bm25 still answers from the same index" is "$(q "flaky pastry dough" | top)" pastry.txt
h60=$(q "flaky pastry dough" --retrieve hybrid -m "$TMP/a.gguf" -k 4)
h1=$(q "flaky pastry dough" --retrieve hybrid -m "$TMP/a.gguf" -k 4 --rrf-k 1)
check "hybrid returns every chunk" is "$(jq '.chunks | length' <<<"$h60")" 4
check "hybrid scores are reciprocal-rank sums (k 60)" is "$(jq '.chunks[0].score <= 2 / 61 and .chunks[3].score >= 1 / 64' <<<"$h60")" true
check "--rrf-k changes the scores" is "$(jq '.chunks[0].score > 2 / 61 and .chunks[0].score <= 1' <<<"$h1")" true
check "--embed-model is the same as -m for the question" is \
  "$(q "$(cat "$TMP/docs/lamp.txt")" --retrieve dense --embed-model "$TMP/a.gguf" | top)" lamp.txt
check "query reports embed_ms for dense" is "$(jq '.embed_ms >= 0' <<<"$h60")" true
check "  and not for bm25" is "$(q "flaky pastry dough" | jq 'has("embed_ms")')" false
check "  and says it in text" has "$("$BIN" rag query "$IDX" glaciers --retrieve dense -m "$TMP/a.gguf" -t 1)" \
  "; embedding the question "

# prewarm: the pair is the top two of `rag query` with the same retrieval, in chunk order
cat "$TMP/docs/ice.txt" >"$TMP/questions.txt"
QI=$(cat "$TMP/docs/ice.txt")
pw() { "$BIN" rag prewarm --cache-dir "$TMP/kv" -m "$TMP/a.gguf" -t 1 "$IDX" --questions "$TMP/questions.txt" -k 2 \
  --pairs 1 "$@" 2>&1; }
pair() { jq -r '[.chunks[] | {chunk, id}] | sort_by(.chunk) | map(.id) | join(" + ")'; }
check "bm25 retrieves one chunk for the question" is "$(q "$QI" -k 2 | jq '.chunks | length')" 1
check "  so prewarm by bm25 (the default) finds no pair" has "$(pw)" \
  "1 questions, the 0 most common opening pairs (of 2 chunks each, by bm25)"
out=$(pw --retrieve dense)
check "prewarm --retrieve dense prewarms the dense query's top two" has "$out" \
  "pair 1: $(q "$QI" --retrieve dense -m "$TMP/a.gguf" -k 2 | pair), opening 1 question(s)"
check "  and reports the embedding time" has "$out" "1 most common opening pairs (of 2 chunks each, by dense; embedding the questions took "
check "  and ends prewarmed" has "$out" "prewarmed 4 chunks and 1 pairs"
out=$(pw --retrieve hybrid --rrf-k 1 --embed-model "$TMP/a.gguf")
check "prewarm --retrieve hybrid --rrf-k 1 prewarms the hybrid query's top two" has "$out" \
  "pair 1: $(q "$QI" --retrieve hybrid --rrf-k 1 -m "$TMP/a.gguf" -k 2 | pair), opening 1 question(s)"

# refusals
check "another model is refused" expect_rc 1 "$BIN" rag query "$IDX" "glaciers" --retrieve dense -m "$TMP/b.gguf"
check "  naming both models" has "$(cat "$TMP/out")" "from model a.gguf"
check "  and the question's" has "$(cat "$TMP/out")" "embedded with b.gguf"
check "another pooling is refused" expect_rc 1 "$BIN" rag query "$IDX" "glaciers" --retrieve hybrid -m "$TMP/a.gguf" --pooling last
check "  naming both poolings" has "$(cat "$TMP/out")" "pooled by mean but the question would be pooled by last"
check "dense needs a model" expect_rc 2 "$BIN" rag query "$IDX" "glaciers" --retrieve dense
check "  and says so" has "$(cat "$TMP/out")" "--embed-model MODEL"
check "a bad --retrieve is refused" expect_rc 2 "$BIN" rag query "$IDX" "glaciers" --retrieve cosine
check "  naming the flag" has "$(cat "$TMP/out")" "--retrieve must be bm25, dense or hybrid"
check "--pooling without --embed is refused" expect_rc 2 "$BIN" rag index -m "$TMP/a.gguf" --docs "$TMP/docs" \
  -o "$TMP/x.idx" --pooling last
"$BIN" rag index -m "$TMP/a.gguf" --docs "$TMP/docs" -o "$TMP/plain.idx" >/dev/null 2>&1
check "dense on an index without vectors is refused" expect_rc 1 "$BIN" rag query "$TMP/plain.idx" "glaciers" \
  --retrieve dense -m "$TMP/a.gguf"
check "  pointing at --embed" has "$(cat "$TMP/out")" "built without --embed"
check "prewarm dense on an index without vectors is refused" expect_rc 1 "$BIN" rag prewarm --cache-dir "$TMP/kv" \
  -m "$TMP/a.gguf" -t 1 "$TMP/plain.idx" --questions "$TMP/questions.txt" --pairs 1 --retrieve dense
check "  pointing at --embed" has "$(cat "$TMP/out")" "built without --embed"
check "prewarm with another embedding model is refused" expect_rc 1 pw --retrieve dense --embed-model "$TMP/b.gguf"
check "  naming it" has "$(cat "$TMP/out")" "embedded with b.gguf"
check "prewarm with another pooling is refused" expect_rc 1 pw --retrieve hybrid --pooling last
check "  naming both poolings" has "$(cat "$TMP/out")" "pooled by mean but the question would be pooled by last"
check "prewarm --server dense needs a model" expect_rc 2 "$BIN" rag prewarm --server http://127.0.0.1:1 "$IDX" \
  --questions "$TMP/questions.txt" --pairs 1 --retrieve dense
check "  and says so" has "$(cat "$TMP/out")" "needs -m MODEL or --embed-model MODEL"
check "prewarm --retrieve without --pairs is refused" expect_rc 2 "$BIN" rag prewarm --cache-dir "$TMP/kv" \
  -m "$TMP/a.gguf" "$IDX" --retrieve dense
check "  naming what it needs" has "$(cat "$TMP/out")" "needs --questions FILE and --pairs N"
check "prewarm: a bad --retrieve is refused" expect_rc 2 pw --retrieve cosine
check "  naming the flag" has "$(cat "$TMP/out")" "--retrieve must be bm25, dense or hybrid"
check "an index without vectors is version 2" is "$(od -An -tu1 -j8 -N1 "$TMP/plain.idx" | tr -d ' ')" 2
check "an index with vectors is version 3" is "$(od -An -tu1 -j8 -N1 "$IDX" | tr -d ' ')" 3
head -c $(($(stat -c %s "$IDX") - 8)) "$IDX" >"$TMP/short.idx"
check "a truncated vector section is refused" expect_rc 1 "$BIN" rag query "$TMP/short.idx" "glaciers"
check "  as truncated" has "$(cat "$TMP/out")" "truncated"
check "a version 2 index of earlier kvtier loads" expect_rc 0 "$BIN" rag query \
  "$KVT_SRC/fuzz/corpus/rag_index/six-docs.idx" "Lyon warehouse"
help=$("$BIN" rag --help)
for f in --embed --embed-model --pooling --retrieve --rrf-k; do check "--help explains $f" has "$help" "  $f "; done
check "--help explains prewarm's --retrieve" has "$help" "how each question is retrieved to pick the pairs"
check "--help explains prewarm's --rrf-k" has "$help" "hybrid's constant, as query's"
check "--help explains prewarm's --embed-model" has "$help" "embed the questions with M"
check "--help explains prewarm's --pooling" has "$help" "the pooling to embed the questions with"
kvt_test_done test_cli_rag_embed
