#!/usr/bin/env bash
# T3 writes made while Redis is away are not lost: node A (write-through)
# serves a request while redis-server is down (the output equals a node
# without T3), holds that request's blocks in memory (stats and /metrics say
# so), and once redis-server is back on the same port sends them on its own:
# without any further request the blocks appear in Redis, and node B, with
# empty T0/T1/T2, is served them from T3 with the same completion.
set -u
command -v redis-server >/dev/null || { echo "SKIP: redis-server is not installed (apt-get install redis-server)"; exit 77; }
command -v curl >/dev/null && command -v jq >/dev/null || { echo "SKIP: needs curl and jq"; exit 77; }
. "$(dirname "$0")/../testutil.sh"

kvt_t3_setup
# reads get 10 s: a loaded machine can outlast the 250 ms default, and this is about sharing
REMOTE=(--kv-remote "redis://127.0.0.1:$RPORT" --kv-remote-key-file "$TMP/key" --kv-remote-timeout-ms 10000)
KVT_SERVE_ARGS=(-m "$TMP/m.gguf" --host 127.0.0.1 -t 1)
LONG="A request that arrives while the shared store is restarting: its blocks are computed here, held in memory by the remote tier's writer, and sent to the store as soon as it answers again, so the other nodes of the fleet still find this prompt there later."
ask() { # ask URL OUT: a greedy completion of the long prompt into OUT
  curl -s -m 60 -H 'Content-Type: application/json' \
    -d "{\"prompt\":\"$LONG\",\"max_tokens\":12,\"temperature\":0}" "$1/v1/completions" >"$2"
}
stat_of() { curl -s "$1/v1/cache/stats" | jq -r "$2"; }
keys() { redis-cli -p "$RPORT" --scan --pattern 'kvt:*' 2>/dev/null | wc -l; }

kvt_start_server C # no T3: the cold reference
ask "${KVT_URL[C]}" "$TMP/cold.json"
kvt_start_server A "${REMOTE[@]}" --write-through
check "A has a T3" is "$(stat_of "${KVT_URL[A]}" '.T3 != null')" true

kvt_stop_redis
ask "${KVT_URL[A]}" "$TMP/a.json"
check "with Redis down A's request succeeds with the cold output" \
  is "$(jq -r '.choices[0].text' "$TMP/a.json")" "$(jq -r '.choices[0].text' "$TMP/cold.json")"
n=$(jq -r '.usage.prompt_tokens' "$TMP/a.json")
blk=$(stat_of "${KVT_URL[A]}" '.block_tokens')
want=$((n / blk))
check "the prompt spans 2+ full blocks ($n tokens, B=$blk)" ge "$want" 2
for _ in $(seq 600); do # the write-through queue drains in the background
  [ "$(stat_of "${KVT_URL[A]}" '.T3.retry_held_blocks')" -ge "$want" ] && break
  sleep 0.05
done
check "A holds the request's blocks while Redis is down" ge "$(stat_of "${KVT_URL[A]}" '.T3.retry_held_blocks')" "$want"
check "... and drops none" is "$(stat_of "${KVT_URL[A]}" '.T3.writes_dropped')" 0
check "metrics show them held" grep -q '^kvtier_remote_retry_held_blocks [1-9]' <(curl -s "${KVT_URL[A]}/metrics")

kvt_start_redis # the same port: RPORT is kept
check "redis-server is back on the same port" is "$(redis-cli -p "$RPORT" ping)" PONG
for _ in $(seq 1200); do # the writer retries on its reconnect backoff (at most 5 s apart)
  [ "$(keys)" -ge "$want" ] && break
  sleep 0.05
done
check "without another request, the held blocks reach Redis ($(keys) of $want)" ge "$(keys)" "$want"
check "A counts them sent" ge "$(stat_of "${KVT_URL[A]}" '.T3.retry_sent_blocks')" "$want"
check "... and holds none now" is "$(stat_of "${KVT_URL[A]}" '.T3.retry_held_blocks')" 0
check "metrics count them sent" grep -q '^kvtier_remote_retry_total{result="sent"} [1-9]' <(curl -s "${KVT_URL[A]}/metrics")

kvt_start_server B "${REMOTE[@]}" --restore always # empty T0/T1, no T2
ask "${KVT_URL[B]}" "$TMP/b.json"
got=$(jq -r '.kvtier.cached_tokens_by_tier.T3' "$TMP/b.json")
check "B is served the prompt from T3 ($got of $((want * blk)) tokens)" ge "$((got * 100))" "$((want * blk * 95))"
check "B's output equals the cold run's" \
  is "$(jq -r '.choices[0].text' "$TMP/b.json")" "$(jq -r '.choices[0].text' "$TMP/cold.json")"

kvt_test_done test_server_remote_retry
