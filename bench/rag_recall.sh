#!/usr/bin/env bash
# Retrieval quality of `kvtier rag query` on a small labelled set, three ways:
# bm25 (terms), dense (cosine between pooled hidden-state vectors, an index built
# with --embed) and hybrid (the two rankings fused by reciprocal rank, --rrf-k).
#   - corpus: bench/data/rag_recall/docs.jsonl, 30 short documents on everyday
#     topics, each one chunk (so a chunk is labelled by its document's id);
#   - questions: bench/data/rag_recall/queries.jsonl, 40 questions with the ids of
#     the documents that answer them (1 to 3), many worded without the documents'
#     words, so terms alone miss some;
#   - per mode: recall@1, @3 and @5 (the share of a question's relevant chunks in its
#     top k, averaged over questions) and MRR (1 / rank of the first relevant chunk).
# The default model is ../shared/models/aidreams260K.gguf, a real but tiny trained
# llama (260K parameters, trained on children's stories): its vectors show that the
# plumbing works and how such a model ranks, not what a real embedding model would
# do. A random-weight model's dense ranking is noise. Numbers only, never pass/fail.
# usage: bench/rag_recall.sh   (MODEL=..., POOLING=mean|last|cls, RRF_K=60, THREADS=2)
set -euo pipefail
cd "$(dirname "$0")/.."
command -v jq >/dev/null || { echo "needs jq"; exit 1; }
BIN=./build/kvtier
MODEL=${MODEL:-../shared/models/aidreams260K.gguf}
TOK=${TOK:-../shared/models/tiny-llama-f32.gguf} # measures the chunks: aidreams260K has no single-space token to pad blocks with
POOLING=${POOLING:-mean}
RRF_K=${RRF_K:-60}
T=${THREADS:-2}
DATA=bench/data/rag_recall
OUT=bench/out/rag_recall
mkdir -p "$OUT"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs; model $(basename "$MODEL"), $POOLING pooling, rrf-k $RRF_K"
"$BIN" rag index -m "$TOK" --embed-model "$MODEL" --docs "$DATA/docs.jsonl" -o "$OUT/recall.idx" --embed \
  --pooling "$POOLING" -t "$T"

n=$(grep -c . "$DATA/queries.jsonl")
printf '%-7s %9s %9s %9s %7s  (%d questions)\n' mode recall@1 recall@3 recall@5 MRR "$n"
for mode in bm25 dense hybrid; do
  : >"$OUT/$mode.tsv"
  while IFS= read -r line; do
    q=$(jq -r .question <<<"$line")
    rel=$(jq -c .relevant <<<"$line")
    extra=()
    [ "$mode" != bm25 ] && extra=(--embed-model "$MODEL" --rrf-k "$RRF_K" -t "$T")
    "$BIN" rag query "$OUT/recall.idx" "$q" -k 5 --json --retrieve "$mode" "${extra[@]}" |
      jq -r --argjson rel "$rel" '[.chunks[].doc] as $got
        | def rec(k): ([$rel[] | select(. as $r | $got[:k] | index($r) != null)] | length) / ($rel | length);
          ([range(0; $got | length) | select($got[.] as $d | $rel | index($d) != null)] | first // null) as $first
        | [rec(1), rec(3), rec(5), (if $first == null then 0 else 1 / ($first + 1) end)] | @tsv' >>"$OUT/$mode.tsv"
  done <"$DATA/queries.jsonl"
  awk -v m="$mode" '{a+=$1; b+=$2; c+=$3; d+=$4} END {printf "%-7s %9.3f %9.3f %9.3f %7.3f\n", m, a/NR, b/NR, c/NR, d/NR}' \
    "$OUT/$mode.tsv"
done
