#!/usr/bin/env bash
# Cache-aware RAG (docs/rag.md): many questions over one corpus whose retrieved
# sets overlap, on the ~250M llama over HTTP (bench/rag_bench.py):
#   - corpus: 40 documents of ~240 words (~300 tokens), one chunk each, indexed
#     with `kvtier rag index`; topic t is chunks 2t, 2t+1, 2t+2, so neighbouring
#     topics share a chunk;
#   - 60 questions, 20 topics x 3: the questions of a topic retrieve the same 3
#     chunks (k = 3) with a different one ranked first; shuffled;
#   - variants, each on a fresh `kvtier serve` (one client, --parallel 1):
#       cold       every request in a namespace of its own (cache_salt): no reuse
#       naive      chunks in score order, best first (what most RAG code does)
#       canonical  chunks by chunk number: the same set is the same bytes
#       cached     kvtier's planner: follow the cached path, then canonical
#       prewarm    `kvtier rag prewarm` first ([system][chunk] for every chunk), then cached
#       pairs      prewarm plus the 20 most common opening pairs [system][a][b] of a question log
#                  (one question per topic, worded unlike the measured ones: `rag_bench.py log`)
#       llama.cpp  llama.cpp's llama-server (LLAMA_SERVER=path; skipped when unset) on the naive
#                  prompts as token ids (the same tokens kvtier's naive variant computes), one slot,
#                  its prompt cache (cache_prompt) on as by default: it reuses the longest common
#                  prefix with the slot's previous prompt only; llama.cpp-nc: cache_prompt off.
#                  Its OpenMP workers spin-wait: on an oversubscribed machine -t 2 measured 11x slower
#                  than -t 1 (load 28 on 2 cores), so compare with THREADS=1 there
# Prints prompt tokens computed, cached fraction, TTFT p50/p95, plan time and
# wall time per variant, then ratios. Numbers only, never pass/fail.
# usage: bench/rag.sh   (MODEL=..., THREADS=2, TOPICS=20, BLOCKS=40, WORDS=240, LLAMA_SERVER=...;
#                        SMALL=1: a dim-256, 4-layer llama instead of the ~250M one, for a loaded machine)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/rag_lib.sh
OUT=bench/out/rag
rm -f "$OUT/results.jsonl"
rag_corpus "$OUT"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs"

KVT_BIN=./build/kvtier
. tests/testutil.sh
KVT_SERVE_WAIT_S=120 KVT_SERVE_LOG_DIR=$OUT # the server logs stay in $OUT
KVT_SERVE_ARGS=(-m "$MODEL" --host 127.0.0.1 --parallel 1 -t "$T" --ctx 2048 --kv-active 1G
  --rag-index "$OUT/corpus.idx")

variant() { # LABEL ORDER [--cold] [--prewarm [PREWARM ARGS...]]
  local label=$1 order=$2 cold="" prewarm=""
  [ "${3:-}" = --cold ] && cold=--cold
  [ "${3:-}" = --prewarm ] && prewarm=1
  kvt_start_server "$label"
  if [ -n "$prewarm" ]; then
    local t0; t0=$(date +%s.%N)
    ./build/kvtier rag prewarm --server "$URL" "$OUT/corpus.idx" \
      --system "You answer questions about the documents below. Quote the document id." "${@:4}" 2>/dev/null
    echo "prewarm took $(echo "$(date +%s.%N) - $t0" | bc) s (not counted below)"
  fi
  python3 bench/rag_bench.py run --url "$URL" --order "$order" $cold --label "$label" \
    --topics "$TOPICS" --blocks "$BLOCKS" | tee -a "$OUT/results.jsonl"
  kvt_stop_server "$label" || true
}

variant cold canonical --cold
variant naive score
variant canonical canonical
variant cached cached
variant prewarm cached --prewarm

# ---- prewarm with common pairs from a question log ------------------------------------------
python3 bench/rag_bench.py log --out "$OUT/log.txt" --topics "$TOPICS" --blocks "$BLOCKS"
variant pairs cached --prewarm --questions "$OUT/log.txt" -k 3 --pairs "$TOPICS"

# ---- llama.cpp's server on the naive prompts ------------------------------------------------
llama_variant() { # LABEL [--no-cache-prompt]: llama-server, the same model, threads and context, one slot
  local label=$1 port pid; shift
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$LLAMA_SERVER" -m "$MODEL" --host 127.0.0.1 --port "$port" -np 1 -t "$T" -c 2048 >"$OUT/$label.log" 2>&1 &
  pid=$!
  trap "kill $pid 2>/dev/null || true" EXIT
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    kill -0 "$pid" 2>/dev/null || { echo "llama-server did not start:" >&2; cat "$OUT/$label.log" >&2; exit 1; }
    sleep 0.2
  done
  python3 bench/rag_bench.py llama --url "http://127.0.0.1:$port" --index "$OUT/corpus.idx" --model "$MODEL" \
    --label "$label" --topics "$TOPICS" --blocks "$BLOCKS" "$@" | tee -a "$OUT/results.jsonl"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  trap - EXIT
}
if [ -n "${LLAMA_SERVER:-}" ]; then
  llama_variant llama.cpp
  llama_variant llama.cpp-nc --no-cache-prompt
else
  echo "llama.cpp variant skipped: set LLAMA_SERVER to a llama-server binary (e.g. /work/llama.cpp/build/bin/llama-server)"
fi
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$OUT/results.jsonl" <<'EOF'
import json, sys
r = {j["label"]: j for j in map(json.loads, open(sys.argv[1]))}
print(f'{"variant":10} {"computed":>9} {"cached":>7} {"chunks hit":>10} {"TTFT p50":>9} {"p95":>8} {"plan ms":>8} {"wall s":>7}')
for k in ["cold", "naive", "canonical", "cached", "prewarm"]:
    j = r[k]
    print(f'{k:10} {j["computed_tokens"]:9d} {100*j["cached_fraction"]:6.1f}% {j["cached_chunks"]:4d}/{j["chunks"]:<5d} '
          f'{j["ttft_p50_ms"]:8.0f}m {j["ttft_p95_ms"]:7.0f}m {j["plan_ms_mean"]:8.3f} {j["wall_s"]:7.1f}')
c, n = r["cached"], r["naive"]
print(f'prompt tokens computed, naive / cached: {n["computed_tokens"] / c["computed_tokens"]:.2f}x '
      f'(naive / prewarm: {n["computed_tokens"] / r["prewarm"]["computed_tokens"]:.2f}x, '
      f'naive / canonical: {n["computed_tokens"] / r["canonical"]["computed_tokens"]:.2f}x)')
print(f'TTFT p50, cold / cached: {r["cold"]["ttft_p50_ms"] / c["ttft_p50_ms"]:.2f}x, naive / cached: '
      f'{n["ttft_p50_ms"] / c["ttft_p50_ms"]:.2f}x, cold / prewarm: {r["cold"]["ttft_p50_ms"] / r["prewarm"]["ttft_p50_ms"]:.2f}x')
print(f'planning (retrieve + order, server side): mean {c["plan_ms_mean"]:.3f} ms, max {c["plan_ms_max"]:.3f} ms per request')
EOF

python3 - "$OUT/results.jsonl" <<'EOF'
import json, sys
r = {j["label"]: j for j in map(json.loads, open(sys.argv[1]))}
c, n = r["cached"], r["naive"]
print(f'planning per request: mean {c["plan_ms_mean"]:.3f} ms, max {c["plan_ms_max"]:.3f} ms (target < 1 ms)')
p = r["pairs"]
print(f'pairs      computed {p["computed_tokens"]:6d} ({100 * p["cached_fraction"]:.1f}% cached, {p["cached_chunks"]}/{p["chunks"]} chunks), '
      f'TTFT p50 {p["ttft_p50_ms"]:.0f} / p95 {p["ttft_p95_ms"]:.0f} ms; naive / pairs: {n["computed_tokens"] / p["computed_tokens"]:.2f}x')
for k in ["llama.cpp", "llama.cpp-nc"]:
    if k not in r:
        continue
    j = r[k]
    print(f'{k:12} computed {j["computed_tokens"]:6d} of {j["prompt_tokens"]} prompt tokens ({100 * j["cached_fraction"]:.1f}% reused), '
          f'TTFT p50 {j["ttft_p50_ms"]:.0f} / p95 {j["ttft_p95_ms"]:.0f} ms (server prompt_ms; client streamed: '
          f'{j["ttft_client_p50_ms"]:.0f} / {j["ttft_client_p95_ms"]:.0f} ms)')
    print(f'  same prompt tokens as kvtier naive: {j["prompt_tokens"] == r["naive"]["prompt_tokens"]}; TTFT p50 {k} / kvtier cached: '
          f'{j["ttft_p50_ms"] / c["ttft_p50_ms"]:.2f}x (target >= 3x), / kvtier prewarm: '
          f'{j["ttft_p50_ms"] / r["prewarm"]["ttft_p50_ms"]:.2f}x; computed tokens {k} / kvtier cached: '
          f'{j["computed_tokens"] / c["computed_tokens"]:.2f}x')
EOF
python3 bench/rag_bench.py bound --topics "$TOPICS" --blocks "$BLOCKS" >"$OUT/bound.json"
python3 - "$OUT/bound.json" <<'EOF'
import json, sys
b = json.load(open(sys.argv[1]))
print(f'chunks computed of {b["chunk_uses"]} uses (exact reuse, this arrival order): planner {b["planner_computed_chunks"]}, '
      f'best order knowing the future {b["best_order_computed_chunks"]}, with prewarm {b["prewarm_computed_chunks"]}, '
      f'with pairs {b["pairs_computed_chunks"]}')
EOF
