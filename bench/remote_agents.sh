#!/usr/bin/env bash
# The 2-node agent workload on one shared T3 (docs/tiers.md "T3: the shared tier on Redis"):
# bench/agent_bench.py's sessions start on node A (round 0) and continue on
# node B (rounds 1 and later), as when a load balancer moves sessions between
# nodes. Two `kvtier serve` processes on loopback, one redis-server this
# script starts on a free loopback port. Three runs of the same workload,
# each with fresh servers and an empty Redis:
#   1 node      every round on A: the reference (B's rounds hit A's own T0)
#   2 nodes     no T3: B computes the sessions A started (cold)
#   2 nodes+T3  B restores from T3 what A computed (A writes through to T3)
# Prints per round TTFT and the cached fraction per tier, then B's TTFT
# against the cold 2-node run. Numbers only; never passes or fails on time.
# usage: bench/remote_agents.sh [MODEL.gguf]
#   env: SESSIONS (4), ROUNDS (2), DOC_WORDS (600), THREADS (1 per server)
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-bench/out/llama250m-spm-f16.gguf}
SESSIONS=${SESSIONS:-4} ROUNDS=${ROUNDS:-2} DOC_WORDS=${DOC_WORDS:-600} T=${THREADS:-1}
BIN=./build/kvtier
if [ ! -f "$MODEL" ]; then
  vocab=../shared/vocab/ggml-vocab-llama-spm.gguf
  extra=()
  [ -f "$vocab" ] && extra=(--vocab-from "$vocab")
  mkdir -p "$(dirname "$MODEL")"
  "$BIN" mkmodel -o "$MODEL" --dim 1024 --layers 16 --heads 16 --kv-heads 4 --ff 2816 --vocab 32000 \
    --type f16 --ctx 16384 "${extra[@]}"
fi
. bench/redis_lib.sh
# --timeout: a long prefill on a busy machine sends nothing for a while; the connection must outlive it
KVT_SERVE_ARGS=(-m "$MODEL" --host 127.0.0.1 -t "$T" --parallel 2 --ctx 16384 --timeout 600)
start_redis 4gb

workload() { # LABEL URL_A [URL_B]
  local b=()
  [ -n "${3:-}" ] && b=(--url2 "$3" --switch-round 1)
  python3 bench/agent_bench.py --url "$2" "${b[@]}" --label "$1" --sessions "$SESSIONS" --rounds "$ROUNDS" \
    --doc-words "$DOC_WORDS" --concurrency 2 --summary "$TMP/summary.jsonl" --dump "$TMP/replies.jsonl" |
    grep -E ' round [0-9]+( on node B)?:|WARNING'
}
stop_all() { local n; for n in "$@"; do kvt_stop_server "$n" || true; done; }

echo "model $MODEL, $SESSIONS sessions x $ROUNDS rounds, doc $DOC_WORDS words, $T thread(s) per server," \
  "Redis on 127.0.0.1:$RPORT"
kvt_start_server A1
workload "1 node" "${KVT_URL[A1]}"
stop_all A1

kvt_start_server A2
kvt_start_server B2
workload "2 nodes" "${KVT_URL[A2]}" "${KVT_URL[B2]}"
stop_all A2 B2

redis-cli -p "$RPORT" flushall >/dev/null
kvt_start_server A3 "${REMOTE[@]}" --write-through
kvt_start_server B3 "${REMOTE[@]}"
workload "2 nodes+T3" "${KVT_URL[A3]}" "${KVT_URL[B3]}"
curl -s "${KVT_URL[B3]}/v1/cache/stats" | jq -c '{T3: .T3 | {restores, hits, misses, bad_values, bytes_read, latency_ms_avg}}'
stop_all A3 B3

python3 - "$TMP/summary.jsonl" "$TMP/replies.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
# Round 0 runs on a fresh node A in all three runs with the same requests: greedy replies must
# be byte-identical (batch composition, timing and cache hits never change greedy output).
reps = {}
for l in open(sys.argv[2]):
    d = json.loads(l)
    reps.setdefault(d["label"], {})[(d["round"], d["session"])] = d
labels = list(reps)
r0 = [k for k in reps[labels[0]] if k[0] == 0]
bad = [(lab, k) for lab in labels[1:] for k in r0 if reps[lab].get(k, {}).get("reply") != reps[labels[0]][k]["reply"]]
print(f"round 0 replies identical in all {len(labels)} runs: " + ("yes" if not bad else f"NO, differing: {bad}"))
# From round 1 on, the prompts differ by design: one node splices its own previous replies back
# as the exact token ids it generated (the reply map, which is per node); node B never saw those
# replies, so it re-tokenizes their text, which may give other and more tokens. Hence the 1-node
# reference runs slightly different prompts (and so gets different replies) from both 2-node runs.
by = {(r["label"], r["round"]): r for r in rows}
rounds = sorted({r["round"] for r in rows})
for k in rounds[1:]:
    cold, t3, one = by.get(("2 nodes", k)), by.get(("2 nodes+T3", k)), by.get(("1 node", k))
    if not (cold and t3 and one):
        continue
    if one["prompt"] != t3["prompt"] or cold["prompt"] != t3["prompt"]:
        print(f"round {k} prompt tokens: one node {one['prompt']}, 2 nodes {cold['prompt']}, 2 nodes+T3 {t3['prompt']} "
              "(node B re-tokenizes the replies node A generated; one node reuses their exact ids)")
    print(f"round {k} on node B: TTFT p50 {t3['ttft_p50']:.2f} s with T3 = {100 * t3['ttft_p50'] / cold['ttft_p50']:.1f}% "
          f"of cold ({cold['ttft_p50']:.2f} s); one node {one['ttft_p50']:.2f} s; computed {t3['computed']} of "
          f"{t3['prompt']} prompt tokens with T3, {cold['computed']} without")
EOF
