#!/usr/bin/env bash
# T3 on a real Redis Cluster that this test starts on loopback (3 primaries, each with one
# replica), with ACLs as managed clusters run them: an ACL user, and the default user behind a
# password of its own. Node A (redis-cluster:// URL, AUTH user password) writes a long prompt
# through; node B, given a plain redis:// URL of one node with the default user's password
# alone (AUTH password), finds the cluster by itself and serves A's prefix from T3 (>= 90%
# of its full blocks) with the completion of a cold node; the blocks are spread over all three
# primaries; /v1/cache/stats and /metrics count T3 by node; `kvtier cache stats|clear` walk
# every primary. A reshard (redis-cli --cluster reshard) while A and B keep sharing prompts
# fails no request and serves nothing wrong; B follows the redirects and a fresh node reads
# what was moved; a node with replica_reads=yes reads some blocks from replicas, same output.
# A primary killed (kill -9) gives misses, not failed requests; once its
# replica has taken over, the nodes find the new primary and T3 hits again, the blocks
# written before the crash included. Every connection (after redirects, map refreshes and the
# failover too) logs in. Wrong or missing credentials stop a node at start-up, saying so; a
# password changed under a running node gives misses and a log line, never a failed request;
# no password shows in a log, the stats or /metrics.
set -u
command -v redis-server >/dev/null && command -v redis-cli >/dev/null ||
  { echo "SKIP: needs redis-server and redis-cli"; exit 77; }
command -v curl >/dev/null && command -v jq >/dev/null || { echo "SKIP: needs curl and jq"; exit 77; }
. "$(dirname "$0")/../testutil.sh"
. "$(dirname "$0")/../rediscluster.sh"

"$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 --vocab 800 --ctx 2048 \
  2>/dev/null
head -c 32 /dev/urandom >"$TMP/key" && chmod 600 "$TMP/key"
# passwords with characters a URL reserves: they travel %XX-escaped
RC_USER=kvt RC_PASS=user-Pw@:/$RANDOM$RANDOM RC_DEFAULT_PASS=default-Pw%?,$RANDOM$RANDOM
kvt_start_redis_cluster 3 1
# loaded CI machines: the checks that need hits give T3 reads 10 s (a cut call is a miss by design)
KEYF=(--kv-remote-key-file "$TMP/key" --kv-remote-timeout-ms 10000)
KVT_SERVE_ARGS=(-m "$TMP/m.gguf" --host 127.0.0.1 -t 1 --ctx 2048)
# ~1700 tokens: 50+ blocks, so every primary holds some of them
X=$(awk 'BEGIN { srand(7); for (i = 0; i < 300; i++) printf "w%d ", int(rand() * 5000); }')
# ask NODE OUT [SALT]: a greedy completion of the prompt into OUT; its HTTP status in OUT.code
ask() {
  local salt=${3:+,\"cache_salt\":\"$3\"}
  curl -s -m 60 -o "$2" -w '%{http_code}' -H 'Content-Type: application/json' \
    -d "{\"prompt\":\"$X\",\"max_tokens\":8,\"temperature\":0$salt}" "${KVT_URL[$1]}/v1/completions" >"$2.code"
}
t3() { jq -r '.kvtier.cached_tokens_by_tier.T3' "$1"; }
text() { jq -r '.choices[0].text' "$1"; }
flush() { curl -s -m 60 -X POST -H 'Content-Type: application/json' -d '' "${KVT_URL[$1]}/v1/cache/flush" >/dev/null; }
# keys in the cluster: the sum of DBSIZE over the running primaries
cluster_keys() {
  local p n=0
  for p in $(kvt_cluster_primaries); do n=$((n + $("${RC_CLI[@]}" -p "$p" dbsize))); done
  echo "$n"
}

kvt_start_server C # no T3: the cold reference
kvt_start_server A --kv-remote "$RC_URL" "${KEYF[@]}" --write-through
# B restores whatever T3 holds (--restore always, as in test_server_remote.sh: sharing, not cost)
kvt_start_server B --kv-remote "redis://:$(kvt_uri_escape "$RC_DEFAULT_PASS")@127.0.0.1:${RC_PORTS[1]}" "${KEYF[@]}" --restore always
check "B finds the cluster from a plain URL" grep -q 'cluster mode' "$TMP/B.log"
ask C "$TMP/cold.json"
ask A "$TMP/a.json"
n=$(jq -r '.usage.prompt_tokens' "$TMP/a.json")
blk=$(curl -s "${KVT_URL[A]}/v1/cache/stats" | jq -r '.block_tokens')
full=$((n / blk * blk))
check "the prompt spans 30+ blocks ($n tokens, B=$blk)" ge "$full" $((30 * blk))
check "A computed it" is "$(t3 "$TMP/a.json")" 0
flush A
check "A's blocks are in the cluster" ge "$(cluster_keys)" $((full / blk))
for p in $(kvt_cluster_primaries); do
  check "primary :$p holds some blocks" gt "$("${RC_CLI[@]}" -p "$p" dbsize)" 0
done
check "three primaries" is "$(kvt_cluster_primaries | wc -l)" 3
ask B "$TMP/b.json"
got=$(t3 "$TMP/b.json")
check "B's first request is served from T3 ($got of $full tokens)" ge $((got * 100)) $((full * 90))
check "B's output equals a cold run's" is "$(text "$TMP/b.json")" "$(text "$TMP/cold.json")"
check "A's output equals a cold run's" is "$(text "$TMP/a.json")" "$(text "$TMP/cold.json")"

curl -s "${KVT_URL[B]}/v1/cache/stats" >"$TMP/stats.json"
check "stats: T3 by node, six nodes" is "$(jq -r '.T3.shards | length' "$TMP/stats.json")" 6
check "stats: hits on three primaries" is "$(jq -r '[.T3.shards[] | select(.primary and .hits > 0)] | length' "$TMP/stats.json")" 3
check "stats: node hits add up" is "$(jq -r '[.T3.shards[].hits] | add' "$TMP/stats.json")" "$(jq -r '.T3.hits' "$TMP/stats.json")"
curl -s "${KVT_URL[A]}/metrics" >"$TMP/metrics.txt"
check "metrics: writes by node" test "$(grep -c '^kvtier_remote_shard_writes_total{node="127.0.0.1:[0-9]*"} [1-9]' "$TMP/metrics.txt")" = 3
curl -s "${KVT_URL[B]}/metrics" >"$TMP/metrics.txt"
check "metrics: hits by node" grep -q '^kvtier_remote_shard_reads_total{node="127.0.0.1:[0-9]*",result="hit"} [1-9]' "$TMP/metrics.txt"
check "metrics: connected" grep -q '^kvtier_remote_connected 1' "$TMP/metrics.txt"
if command -v python3 >/dev/null; then
  check "metrics: the exposition with node labels is clean" python3 "$(dirname "$0")/../promcheck.py" "$TMP/metrics.txt"
fi

"$BIN" cache stats --kv-remote "$RC_URL" >"$TMP/cstats.txt" 2>&1
vals=$(grep -o '^remote: [0-9]* values' "$TMP/cstats.txt" | grep -o '[0-9]*')
check "cache stats counts every primary's values" is "${vals:-none}" "$(cluster_keys)"
# credentials the cluster refuses, or none: a clear start-up error that shows no password
refused() { # refused URL: serve with URL exits at start-up, saying the credentials were refused
  timeout 120 "$BIN" serve --port 0 "${KVT_SERVE_ARGS[@]}" --kv-remote "$1" "${KEYF[@]}" >"$TMP/refused.log" 2>&1
  local rc=$?
  [ "$rc" != 0 ] && [ "$rc" != 124 ] && grep -q 'refused the credentials' "$TMP/refused.log" &&
    ! grep -q 'not-the-Pw' "$TMP/refused.log"
}
check "a wrong password stops a node at start-up" refused "redis-cluster://kvt:not-the-Pw@127.0.0.1:${RC_PORTS[2]}"
check "... as does an unknown user" refused "redis-cluster://nobody:not-the-Pw@127.0.0.1:${RC_PORTS[2]}"
check "... and no credentials (plain URL)" refused "redis://127.0.0.1:${RC_PORTS[2]}"
check "... and a wrong password alone" refused "redis://:not-the-Pw@127.0.0.1:${RC_PORTS[2]}"
"$BIN" cache stats --kv-remote "redis-cluster://kvt:not-the-Pw@127.0.0.1:${RC_PORTS[0]}" >"$TMP/badstats.txt" 2>&1
check "cache stats with a wrong password fails, saying why" grep -q 'log in.*WRONGPASS' "$TMP/badstats.txt"
"$BIN" cache stats --kv-remote "rediss-cluster://127.0.0.1:${RC_PORTS[0]}" >"$TMP/tls.txt" 2>&1
check "a TLS URL is refused, saying why" grep -q 'TLS is not supported' "$TMP/tls.txt"

# ---- a reshard under traffic: A computes prompts for new tenants, B reads them ----
ask A "$TMP/pre.json" pre # written before the reshard, read by B only after it
flush A
keys0=$(cluster_keys)
traffic() {
  local i=0
  while [ ! -f "$TMP/stop" ] || [ "$i" -lt 2 ]; do
    i=$((i + 1))
    ask A "$TMP/rs-$i-a.json" "rs-$i"
    flush A
    ask B "$TMP/rs-$i-b.json" "rs-$i"
  done
}
traffic &
tpid=$!
from=$("${RC_CLI[@]}" -p "${RC_PORTS[0]}" cluster myid)
to=$("${RC_CLI[@]}" -p "${RC_PORTS[1]}" cluster myid)
"${RC_CLI[@]}" --cluster reshard "127.0.0.1:${RC_PORTS[0]}" --cluster-from "$from" --cluster-to "$to" \
  --cluster-slots 1000 --cluster-yes >"$TMP/reshard.log" 2>&1
check "the reshard ran" test $? = 0
touch "$TMP/stop"
wait "$tpid"
wait_for kvt_cluster_ok
bad_out=0 codes=0 rounds=0
for f in "$TMP"/rs-*-[ab].json; do
  rounds=$((rounds + 1))
  [ "$(cat "$f.code")" = 200 ] || codes=$((codes + 1))
  [ "$(text "$f")" = "$(text "$TMP/cold.json")" ] || bad_out=$((bad_out + 1))
done
check "requests during the reshard ($rounds) all succeeded" is "$codes" 0
check "... and every output equals the cold run's" is "$bad_out" 0
flush A
check "no value was lost ($keys0 before the reshard)" ge "$(cluster_keys)" "$keys0"
ask B "$TMP/pre-b.json" pre
check "after the reshard B reads what A wrote before it" ge $(($(t3 "$TMP/pre-b.json") * 100)) $((full * 90))
check "... with the cold output" is "$(text "$TMP/pre-b.json")" "$(text "$TMP/cold.json")"
curl -s "${KVT_URL[B]}/v1/cache/stats" >"$TMP/stats2.json"
check "B followed redirects" gt "$(jq -r '[.T3.shards[].redirects] | add' "$TMP/stats2.json")" 0
kvt_start_server D --kv-remote "$RC_URL" "${KEYF[@]}" --restore always
ask D "$TMP/d.json"
check "a fresh node reads the moved blocks" ge $(($(t3 "$TMP/d.json") * 100)) $((full * 90))
check "... with the cold output" is "$(text "$TMP/d.json")" "$(text "$TMP/cold.json")"

# replica reads: E reads from the primaries and their replicas (READONLY), same bytes
kvt_start_server E --kv-remote "$RC_URL?replica_reads=yes" "${KEYF[@]}" --restore always
ask E "$TMP/e.json"
check "with replica reads a fresh node reads the prefix from T3" ge $(($(t3 "$TMP/e.json") * 100)) $((full * 90))
check "... with the cold output" is "$(text "$TMP/e.json")" "$(text "$TMP/cold.json")"
curl -s "${KVT_URL[E]}/v1/cache/stats" >"$TMP/stats3.json"
check "... some of it from replicas" gt "$(jq -r '[.T3.shards[] | select(.primary | not) | .hits] | add' "$TMP/stats3.json")" 0

# ---- a primary dies: misses, then hits once its replica took over ----
for t in fo-1 fo-2; do ask A "$TMP/$t.json" "$t"; done
flush A
victim=${RC_PORTS[0]}
replica=$("${RC_CLI[@]}" -p "$victim" role | sed -n 4p)
in_sync() { [ "$("${RC_CLI[@]}" -p "$replica" dbsize)" = "$("${RC_CLI[@]}" -p "$victim" dbsize)" ]; }
check "the victim's replica has its keys" wait_for in_sync
kvt_cluster_kill 0
ask B "$TMP/fo-1-b.json" fo-1
check "with a primary down B's request succeeds" is "$(cat "$TMP/fo-1-b.json.code")" 200
check "... with the cold output" is "$(text "$TMP/fo-1-b.json")" "$(text "$TMP/cold.json")"
check "... missing the dead primary's blocks" lt "$(t3 "$TMP/fo-1-b.json")" "$full"
check "the replica takes over" wait_for kvt_cluster_ok
check "the replica is a primary now" wait_for eval '"${RC_CLI[@]}" -p "$replica" role | head -1 | grep -q master'
TRY=0
shared_again() { # a fresh tenant each try: A writes it, B must read it from T3
  TRY=$((TRY + 1))
  ask A "$TMP/fa.json" "fa-$TRY"
  flush A
  ask B "$TMP/fb.json" "fa-$TRY"
  [ "$(t3 "$TMP/fb.json")" -ge $((full * 9 / 10)) ] 2>/dev/null
}
check "after the failover A and B share through T3 again" wait_for shared_again
check "... with the cold output" is "$(text "$TMP/fb.json")" "$(text "$TMP/cold.json")"
ask B "$TMP/fo-2-b.json" fo-2
check "blocks written before the crash are hits again" ge $(($(t3 "$TMP/fo-2-b.json") * 100)) $((full * 90))
check "... with the cold output" is "$(text "$TMP/fo-2-b.json")" "$(text "$TMP/cold.json")"

ns=$(grep -o '[0-9a-f]\{32\}' "$TMP/cstats.txt" | head -1)
"$BIN" cache clear --kv-remote "$RC_URL" --namespace "$ns" >"$TMP/cclear.txt" 2>&1
check "cache clear over every primary empties the namespace" is "$(cluster_keys)" 0

# ---- the user's password changes under a running node: misses and a log line, no failed request ----
kvt_start_server F --kv-remote "$RC_URL" "${KEYF[@]}" --restore always
for i in $(seq 0 $((RC_N - 1))); do
  [ -z "${KVT_PID[rc$i]:-}" ] || "${RC_CLI[@]}" -p "${RC_PORTS[$i]}" acl setuser kvt resetpass '>rotated-Pw' >/dev/null
done
ask F "$TMP/f.json" fo-2
check "with its password refused F's request succeeds" is "$(cat "$TMP/f.json.code")" 200
check "... computed, not from T3" is "$(t3 "$TMP/f.json")" 0
check "... with the cold output" is "$(text "$TMP/f.json")" "$(text "$TMP/cold.json")"
check "... and F's log says it cannot log in" grep -q 'cannot log in: WRONGPASS' "$TMP/F.log"
for n in A B D E F; do
  curl -s "${KVT_URL[$n]}/v1/cache/stats" "${KVT_URL[$n]}/metrics" >>"$TMP/exposed.txt"
done
secrets=("$RC_PASS" "$RC_DEFAULT_PASS" "$(kvt_uri_escape "$RC_PASS")" "$(kvt_uri_escape "$RC_DEFAULT_PASS")")
check "no password in the stats or metrics" eval '! grep -qF "${secrets[@]/#/-e}" "$TMP/exposed.txt"'
check "... nor in any node's log" eval '! grep -qF "${secrets[@]/#/-e}" "$TMP"/[A-F].log "$TMP"/*.txt'
kvt_test_done test_server_remote_cluster
