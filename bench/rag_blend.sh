#!/usr/bin/env bash
# Approximate reuse on the RAG benchmark set of bench/rag.sh (docs/rag.md "Approximate reuse"):
# the same corpus (40 chunks of ~300 tokens) and 60 questions (20 topics x 3), each
# question's 3 chunks in score order, run in one process by bench_blend against full
# recompute (a cold run of the same prompt): exact reuse, and approximate reuse at
# several recompute ratios, with and without prewarm. Prints tokens computed, tokens
# reused approximately, first-token top-1 agreement, greedy agreement and the largest
# logit deviation. Numbers only, never pass/fail.
# usage: bench/rag_blend.sh   (MODEL=..., THREADS=2, TOPICS=20, BLOCKS=40, WORDS=240,
#                              RATIOS=0,0.15,0.3,1; SMALL=1: a dim-256, 4-layer llama instead
#                              of the ~250M one, for a loaded machine)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/rag_lib.sh
RATIOS=${RATIOS:-0,0.15,0.3,1}
OUT=bench/out/rag_blend
[ -x build/bench_blend ] || { echo "build first: scripts/build.sh build" >&2; exit 1; }
rag_corpus "$OUT"
python3 - "$TOPICS" "$BLOCKS" >"$OUT/questions.txt" <<'PY'
import sys, types
sys.path.insert(0, "bench")
import rag_bench
for q in rag_bench.questions(types.SimpleNamespace(topics=int(sys.argv[1]), blocks=int(sys.argv[2]))):
    print(q)
PY
echo "load: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs"
./build/bench_blend -m "$MODEL" --index "$OUT/corpus.idx" --questions "$OUT/questions.txt" -t "$T" --ratios "$RATIOS"
./build/bench_blend -m "$MODEL" --index "$OUT/corpus.idx" --questions "$OUT/questions.txt" -t "$T" --ratios "$RATIOS" --prewarm
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
