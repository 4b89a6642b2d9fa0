#!/usr/bin/env bash
# The agent workload on a fleet: three `kvtier serve` nodes sharing one T3 (a redis-server this
# script starts on a free loopback port), behind `kvtier route` on loopback. Two runs of the same
# workload (bench/agent_bench.py, named sessions), each with fresh nodes and an empty Redis:
#   affinity      kvtier route's default: sessions stick, prefixes follow their cache, load bounded
#   round-robin   kvtier route --policy round-robin: each request to the next node
# Prints per round computed prompt tokens, TTFT p50/p99 and wall time, the router's per-node
# counters (requests, spills, cached share) and each node's T3 reads. Numbers only; it never
# passes or fails on time. With T3 on a Redis Cluster, set KV_REMOTE to its URL
# (e.g. redis-cluster://127.0.0.1:7000) and the script uses it instead of starting a redis-server.
# usage: bench/fleet.sh [MODEL.gguf]
#   env: SESSIONS (24), ROUNDS (3), DOC_WORDS (600), CONCURRENCY (6), THREADS (1 per node),
#        PARALLEL (4 per node), MAX_TOKENS (16)
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-bench/out/fleet-small.gguf}
SESSIONS=${SESSIONS:-24} ROUNDS=${ROUNDS:-3} DOC_WORDS=${DOC_WORDS:-600} CONC=${CONCURRENCY:-6}
T=${THREADS:-1} PAR=${PARALLEL:-4} MAXTOK=${MAX_TOKENS:-16}
BIN=./build/kvtier
if [ ! -f "$MODEL" ]; then
  mkdir -p "$(dirname "$MODEL")"
  "$BIN" mkmodel -o "$MODEL" --dim 512 --layers 8 --heads 8 --kv-heads 4 --ff 1408 --vocab 32000 --type f16 \
    --ctx 16384 2>/dev/null
fi
. bench/redis_lib.sh
if [ -n "${KV_REMOTE:-}" ]; then
  head -c 32 /dev/urandom >"$TMP/key" && chmod 600 "$TMP/key"
  REMOTE=(--kv-remote "$KV_REMOTE" --kv-remote-key-file "$TMP/key")
else
  start_redis 4gb
fi
KVT_SERVE_ARGS=(-m "$MODEL" --host 127.0.0.1 -t "$T" --parallel "$PAR" --ctx 16384 --timeout 600
  "${REMOTE[@]}" --write-through)

run() { # run POLICY
  local n urls=() rpid
  [ -z "${RPORT:-}" ] || redis-cli -p "$RPORT" flushall >/dev/null
  for n in A B C; do
    kvt_start_server "$n$1"
    urls+=("${KVT_URL[$n$1]}")
  done
  "$BIN" route --nodes "$(IFS=,; echo "${urls[*]}")" --port 0 --policy "$1" --health-ms 200 >"$TMP/route-$1.log" 2>&1 &
  rpid=$!
  KVT_PID[route-$1]=$rpid
  wait_for grep -q 'listening on http://' "$TMP/route-$1.log"
  local r
  r=$(grep -ao 'listening on http://[^ ]*' "$TMP/route-$1.log" | head -n 1 | cut -d' ' -f3)
  wait_for test "$(curl -s "$r/health" | jq -r .nodes_up)" = 3
  python3 bench/agent_bench.py --url "$r" --label "$1" --sessions "$SESSIONS" --rounds "$ROUNDS" \
    --doc-words "$DOC_WORDS" --concurrency "$CONC" --max-tokens "$MAXTOK" --kvtier-sessions \
    --summary "$TMP/summary.jsonl" | grep -E ' round [0-9]+:|total wall|WARNING|stopped'
  curl -s "$r/metrics" | grep -E '^kvtier_route_(requests_total|spills_total|cached_fraction|failovers_total)' |
    sed "s/^/  [$1] /"
  for n in A B C; do
    curl -s "${KVT_URL[$n$1]}/v1/cache/stats" |
      jq -c --arg n "$n" '{node: $n, T3: (.T3 // {} | {restores, hits, misses, bytes_read})}' | sed "s/^/  [$1] /"
    kvt_stop_server "$n$1" || true
  done
  kill "$rpid" 2>/dev/null || true
  wait "$rpid" 2>/dev/null || true
  unset "KVT_PID[route-$1]"
}

echo "model $MODEL, $SESSIONS sessions x $ROUNDS rounds, doc $DOC_WORDS words, concurrency $CONC," \
  "3 nodes x $T thread(s), --parallel $PAR; load: $(uptime | sed 's/.*load average: //')"
run affinity
run round-robin
python3 - "$TMP/summary.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {(r["label"], r["round"]): r for r in rows}
print("round  computed(aff/rr)   ttft_p50 s(aff/rr)   wall s(aff/rr)")
for k in sorted({r["round"] for r in rows}):
    a, b = by.get(("affinity", k), {}), by.get(("round-robin", k), {})
    g = lambda d, f: d.get(f, float("nan"))
    print(f"{k:5d}  {g(a,'computed'):>8}/{g(b,'computed'):<8}  {g(a,'ttft_p50'):8.3f}/{g(b,'ttft_p50'):<8.3f}"
          f"  {g(a,'wall'):7.2f}/{g(b,'wall'):<7.2f}")
PY
