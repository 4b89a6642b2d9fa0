#!/usr/bin/env bash
# The agent workload on a fleet: three `kvtier serve` nodes behind `kvtier route` on loopback,
# sharing T3 on a 3-primary Redis Cluster and, for comparison, on one redis-server (both started
# here on free loopback ports and emptied before each run). The same workload
# (bench/agent_bench.py, named sessions) runs under each routing policy on each backend, with
# fresh nodes each time:
#   affinity      kvtier route's default: sessions stick, prefixes follow their cache, load weighed
#   round-robin   kvtier route --policy round-robin: each request to the next node
# Prints per round computed prompt tokens, TTFT p50/p99 (rounds >= 1 resume sessions), wall time
# and the T3 restore bandwidth (value bytes the nodes read over the seconds they spent in T3 read
# calls); the router's per-node counters; how the blocks spread over the cluster's primaries.
# Then the T3 client alone (build/bench_remote, one process, PAIRS alternated pairs): restore
# bandwidth and client CPU seconds per GB restored from the cluster and from one Redis. Numbers
# only; it never passes or fails on time. KV_REMOTE=URL uses that T3 (e.g. a cluster of your
# own) instead of starting either backend.
# usage: bench/fleet.sh [MODEL.gguf]
#   env: SESSIONS (24), ROUNDS (3), DOC_WORDS (600), SYSTEM_WORDS (300), CONCURRENCY (6),
#        THREADS (1 per node), PARALLEL (4 per node), MAX_TOKENS (16), POLICIES ("affinity
#        round-robin"; empty: only the T3 client comparison),
#        BACKENDS ("cluster redis"), PAIRS (3), PAYLOAD_KIB (512, bench_remote's block payload)
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-bench/out/fleet-small.gguf}
SESSIONS=${SESSIONS:-24} ROUNDS=${ROUNDS:-3} DOC_WORDS=${DOC_WORDS:-600} SYS_WORDS=${SYSTEM_WORDS:-300}
CONC=${CONCURRENCY:-6}
T=${THREADS:-1} PAR=${PARALLEL:-4} MAXTOK=${MAX_TOKENS:-16} PAIRS=${PAIRS:-3} PAYLOAD_KIB=${PAYLOAD_KIB:-512}
POLICIES=${POLICIES-affinity round-robin} BACKENDS=${BACKENDS:-cluster redis}
BIN=./build/kvtier
if [ ! -f "$MODEL" ]; then
  mkdir -p "$(dirname "$MODEL")"
  "$BIN" mkmodel -o "$MODEL" --dim 512 --layers 8 --heads 8 --kv-heads 4 --ff 1408 --vocab 32000 --type f16 \
    --ctx 16384 2>/dev/null
fi
. bench/redis_lib.sh
. tests/rediscluster.sh
declare -A T3URL=()
if [ -n "${KV_REMOTE:-}" ]; then
  BACKENDS=given
  T3URL[given]=$KV_REMOTE
  head -c 32 /dev/urandom >"$TMP/key" && chmod 600 "$TMP/key"
else
  for b in $BACKENDS; do
    case $b in
      cluster)
        # a long node timeout: on a loaded machine a node that answers late is not a failed one
        kvt_start_redis_cluster 3 0 --maxmemory 2gb --maxmemory-policy allkeys-lru --cluster-node-timeout 30000
        T3URL[cluster]=$RC_URL
        ;;
      redis)
        start_redis 4gb # writes $TMP/key too
        T3URL[redis]=redis://127.0.0.1:$RPORT
        ;;
      *) echo "$0: BACKENDS: cluster or redis, not '$b'" >&2; exit 2 ;;
    esac
  done
  [ -f "$TMP/key" ] || { head -c 32 /dev/urandom >"$TMP/key" && chmod 600 "$TMP/key"; }
fi

flush() { # flush BACKEND: an empty T3 before a run
  local p
  case $1 in
    cluster) for p in "${RC_PORTS[@]}"; do redis-cli -p "$p" flushall >/dev/null; done ;;
    redis) redis-cli -p "$RPORT" flushall >/dev/null ;;
  esac
}

spread() { # spread LABEL: each primary's keys against the mean of them
  local p n=() sum=0 k
  for p in $(kvt_cluster_primaries); do
    k=$(redis-cli -p "$p" dbsize)
    n+=("$k")
    sum=$((sum + k))
  done
  python3 - "$1" "${n[@]}" <<'PY'
import sys
label, n = sys.argv[1], [int(x) for x in sys.argv[2:]]
mean = sum(n) / len(n) if n else 0
dev = [100.0 * (x - mean) / mean for x in n] if mean else []
print(f"  [{label}] blocks by primary: {n}; vs the mean: " + ", ".join(f"{d:+.1f}%" for d in dev))
PY
}

run() { # run POLICY BACKEND
  local label=$1/$2 n urls=() rpid r
  flush "$2"
  KVT_SERVE_ARGS=(-m "$MODEL" --host 127.0.0.1 -t "$T" --parallel "$PAR" --ctx 16384 --timeout 600
    --kv-remote "${T3URL[$2]}" --kv-remote-key-file "$TMP/key" --write-through)
  for n in A B C; do
    kvt_start_server "$n-$1-$2"
    urls+=("${KVT_URL[$n-$1-$2]}")
  done
  "$BIN" route --nodes "$(IFS=,; echo "${urls[*]}")" --port 0 --policy "$1" --health-ms 200 \
    >"$TMP/route-$1-$2.log" 2>&1 &
  rpid=$!
  KVT_PID[route-$1-$2]=$rpid
  wait_for grep -q 'listening on http://' "$TMP/route-$1-$2.log"
  r=$(grep -ao 'listening on http://[^ ]*' "$TMP/route-$1-$2.log" | head -n 1 | cut -d' ' -f3)
  wait_for test "$(curl -s "$r/health" | jq -r .nodes_up)" = 3
  echo "== $label (load: $(uptime | sed 's/.*load average: //'))"
  python3 bench/agent_bench.py --url "$r" --label "$label" --sessions "$SESSIONS" --rounds "$ROUNDS" \
    --doc-words "$DOC_WORDS" --system-words "$SYS_WORDS" --concurrency "$CONC" --max-tokens "$MAXTOK" --kvtier-sessions \
    --node-metrics "$(IFS=,; echo "${urls[*]}")" --summary "$TMP/summary.jsonl" |
    grep -E ' round [0-9]+:|total wall|WARNING|stopped'
  curl -s "$r/metrics" | grep -E '^kvtier_route_(requests_total|spills_total|cached_fraction|failovers_total)' |
    sed "s|^|  [$label] |"
  for n in A B C; do
    curl -s "${KVT_URL[$n-$1-$2]}/v1/cache/stats" |
      jq -c --arg n "$n" '{node: $n, T3: (.T3 // {} | {restores, hits, misses, bytes_read})}' | sed "s|^|  [$label] |"
    kvt_stop_server "$n-$1-$2" || true
  done
  [ "$2" != cluster ] || spread "$label"
  kill "$rpid" 2>/dev/null || true
  wait "$rpid" 2>/dev/null || true
  unset "KVT_PID[route-$1-$2]"
}

echo "model $MODEL, $SESSIONS sessions x $ROUNDS rounds, doc $DOC_WORDS words, system $SYS_WORDS, concurrency $CONC," \
  "3 nodes x $T thread(s), --parallel $PAR; backends: $BACKENDS; load: $(uptime | sed 's/.*load average: //')"
for b in $BACKENDS; do # each backend's policies back to back: the policy pairs run closest in time
  for pol in $POLICIES; do run "$pol" "$b"; done
done
[ ! -f "$TMP/summary.jsonl" ] || python3 - "$TMP/summary.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
labels = list(dict.fromkeys(r["label"] for r in rows))
print("label                  round  computed  ttft_p50 s  wall s  T3 MB read  T3 MB/s")
for lab in labels:
    for r in (x for x in rows if x["label"] == lab):
        print(f"{lab:22s} {r['round']:5d}  {r['computed']:8d}  {r['ttft_p50']:10.3f}  {r['wall']:6.1f}"
              f"  {r.get('t3_bytes', 0) / 1e6:10.1f}  {r.get('t3_mbps', 0):7.0f}")
PY

# the T3 client alone: one process restoring PAYLOAD_KIB blocks, cluster and one Redis alternated
if [ -n "${T3URL[cluster]:-}" ] && [ -n "${T3URL[redis]:-}" ] && [ "$PAIRS" -gt 0 ]; then
  echo "== T3 client, $PAIRS alternated pairs, $PAYLOAD_KIB KiB payloads (load: $(uptime | sed 's/.*load average: //'))"
  for i in $(seq "$PAIRS"); do
    for b in cluster redis; do
      flush "$b"
      ./build/bench_remote --url "${T3URL[$b]}" --key-file "$TMP/key" --payload-kib "$PAYLOAD_KIB" --blocks 64 \
        --reps 5 >"$TMP/client-$b-$i.txt" 2>&1 || echo "  [$b $i] failed: $(tail -1 "$TMP/client-$b-$i.txt")"
      grep 'client CPU' "$TMP/client-$b-$i.txt" | sed "s/^/  [$b $i] /" | tee -a "$TMP/client.txt" || true
    done
  done
  [ ! -f "$TMP/client.txt" ] || python3 - "$TMP/client.txt" <<'PY'
import re, statistics, sys
by = {}
for line in open(sys.argv[1]):
    b = line.split("[")[1].split()[0]
    mean = float(re.search(r"mean (\d+) MB/s", line).group(1))
    cpu = float(re.search(r"client CPU ([\d.]+) s per GB", line).group(1))
    by.setdefault(b, []).append((mean, cpu))
for b, v in by.items():
    print(f"  {b}: restore mean MB/s median {statistics.median(x[0] for x in v):.0f}, "
          f"client CPU s/GB median {statistics.median(x[1] for x in v):.2f} (runs: {[x[1] for x in v]})")
c = [x[1] for x in by.get("cluster", [])]
r = [x[1] for x in by.get("redis", [])]
if c and r:
    ratios = [a / b for a, b in zip(c, r)]
    print(f"  client CPU per GB, cluster / one Redis: median {statistics.median(ratios):.2f}x (pairs: "
          + ", ".join(f"{x:.2f}" for x in ratios) + ")")
PY
fi
