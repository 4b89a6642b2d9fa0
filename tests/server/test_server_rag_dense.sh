#!/usr/bin/env bash
# Dense and hybrid retrieval on the RAG route (POST /v1/rag/chat/completions) with an index
# built by `kvtier rag index --embed` of the served (random-weight) model, over loopback:
# - kvtier.rag.retrieve "dense": a document's own text retrieves it first (cosine 1); the
#   report says how it retrieved and how long embedding the question took (embed_ms);
# - "hybrid" (kvtier.rag.rrf_k): the server's ranking and scores equal `kvtier rag query
#   --retrieve hybrid` for the same question, so the server embeds the question as the CLI does;
# - --rag-retrieve sets the default; bm25 stays the default without it;
# - refused with a 400 naming the field: an unknown retrieve, a bad rrf_k; dense on a server
#   whose index has no vectors or was embedded by another model (naming both models);
# - refused at start: --rag-retrieve dense with another model's index, or an index without vectors.
# Needs curl and jq.
set -u
command -v curl >/dev/null && command -v jq >/dev/null || { echo "SKIP: needs curl and jq"; exit 77; }
. "$(dirname "$0")/../testutil.sh"
. "$(dirname "$0")/../ragdense.sh"
has() { case "$1" in *"$2"*) return 0 ;; esac; echo "  '$1' lacks '$2'" >&2; return 1; }
kvt_rag_dense_setup
"$BIN" rag index -m "$TMP/a.gguf" --docs "$TMP/docs" -o "$IDX" --embed -t 1 >/dev/null 2>&1 &&
  "$BIN" rag index -m "$TMP/a.gguf" --docs "$TMP/docs" -o "$TMP/plain.idx" >/dev/null 2>&1 || { echo "index failed"; exit 1; }
KVT_SERVE_ARGS=(--host 127.0.0.1 -t 1 -c 1024)
ask() { # QUESTION kvtier.rag-JSON
  post /v1/rag/chat/completions "$(jq -cn --arg q "$1" --argjson r "$2" \
    '{messages: [{role: "user", content: $q}], max_tokens: 2, temperature: 0, kvtier: {rag: $r}}')"
}

kvt_start_server a -m "$TMP/a.gguf" --rag-index "$IDX"
ask "$(cat "$TMP/docs/ice.txt")" '{"retrieve": "dense", "k": 2, "order": "score"}'
check "dense: 200" is "$CODE" 200
check "dense: the document's own text first" is "$(jb '.kvtier.rag.chunks[0].doc')" ice.txt
check "dense: cosine 1" is "$(jb '.kvtier.rag.chunks[0].score > 0.99999')" true
check "dense: the report says dense" is "$(jb '.kvtier.rag.retrieve')" dense
check "dense: the report gives embed_ms" is "$(jb '.kvtier.rag.embed_ms >= 0')" true
Q="flaky pastry dough"
ask "$Q" '{"retrieve": "hybrid", "rrf_k": 5, "k": 4, "order": "score"}'
check "hybrid: 200" is "$CODE" 200
check "hybrid: the report gives rrf_k" is "$(jb '"\(.kvtier.rag.retrieve) \(.kvtier.rag.rrf_k)"')" "hybrid 5"
got=$(jb -c '[.kvtier.rag.chunks[] | [.doc, .score]]')
want=$("$BIN" rag query "$IDX" "$Q" --retrieve hybrid -m "$TMP/a.gguf" --rrf-k 5 -k 4 -t 1 --json |
  jq -c '[.chunks[] | [.doc, .score]]')
check "hybrid: the server's ranking and scores are the CLI's" is "$got" "$want"
ask "$Q" '{}'
check "bm25 by default" is "$(jb '.kvtier.rag.retrieve')" bm25
check "  whose report has no embed_ms" is "$(jb '.kvtier.rag | has("embed_ms")')" false
ask "$Q" '{"retrieve": "cosine"}'
check "an unknown retrieve: 400" is "$CODE" 400
check "  naming the field" is "$(jb '.error.param')" kvtier.rag.retrieve
ask "$Q" '{"retrieve": "hybrid", "rrf_k": 0}'
check "rrf_k 0: 400 naming it" is "$CODE $(jb '.error.param')" "400 kvtier.rag.rrf_k"
kvt_stop_server a

kvt_start_server b -m "$TMP/b.gguf" --rag-index "$IDX"
ask "$Q" '{"retrieve": "dense"}'
check "another model's index: dense is a 400" is "$CODE" 400
check "  naming both models" has "$(jb '.error.message')" "from model a.gguf"
check "  and the served one" has "$(jb '.error.message')" "embedded with b.gguf"
ask "$Q" '{"retrieve": "bm25"}'
check "  while bm25 still answers" is "$CODE" 200
kvt_stop_server b

kvt_start_server p -m "$TMP/a.gguf" --rag-index "$TMP/plain.idx"
ask "$Q" '{"retrieve": "hybrid"}'
check "an index without vectors: hybrid is a 400" is "$CODE" 400
check "  pointing at --embed" has "$(jb '.error.message')" "--embed"
kvt_stop_server p

kvt_start_server h -m "$TMP/a.gguf" --rag-index "$IDX" --rag-retrieve hybrid --rag-rrf-k 7
ask "$Q" '{}'
check "--rag-retrieve sets the default" is "$(jb '"\(.kvtier.rag.retrieve) \(.kvtier.rag.rrf_k)"')" "hybrid 7"
kvt_stop_server h

check "start: another model's index with --rag-retrieve dense is refused" \
  expect_rc 1 "$BIN" serve -m "$TMP/b.gguf" --host 127.0.0.1 --port 0 --rag-index "$IDX" --rag-retrieve dense
check "  naming both models" has "$(cat "$TMP/out")" "a.gguf"
check "start: an index without vectors with --rag-retrieve hybrid is refused" \
  expect_rc 1 "$BIN" serve -m "$TMP/a.gguf" --host 127.0.0.1 --port 0 --rag-index "$TMP/plain.idx" --rag-retrieve hybrid
check "  pointing at --embed" has "$(cat "$TMP/out")" "--embed"
kvt_test_done test_server_rag_dense
