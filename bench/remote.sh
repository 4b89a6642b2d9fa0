#!/usr/bin/env bash
# The shared tier (T3) against cold and T2, on the ~250M llama of the issues
# (bench/speed.sh's model; MODEL=... for another) with a ~2,048-token prefix:
# node A computes it (cold TTFT) with --write-through into T2 and T3; node B,
# a fresh process on the same Redis, answers its first request from T3 (three
# fresh B processes, each its first request); then A restarts on its disk
# alone and answers from T2. Then T3's restore bandwidth (value bytes / restore
# time) against `redis-benchmark -t get` at the same value size, on one
# pipelined connection like T3's reads and with 50 clients. Starts its own
# redis-server on a free loopback port. Then, unless ZSTD=0, the same with
# --kv-remote-compress zstd: an empty Redis, node Z computes and writes
# compressed values, fresh nodes read them (compression ratio on these real
# KV blocks, restore bandwidth and TTFT). BIN=... runs another build (for
# before/after comparisons; ZSTD=0 for a build without the flag). T3_ARGS
# adds flags to every node's T3 flags, e.g. T3_ARGS="--kv-remote-timeout-ms
# 5000" on a loaded machine, where the default per-call deadline cuts a
# restore short and the rest of the prefix is recomputed. Numbers only;
# never passes or fails on time.
# usage: bench/remote.sh [THREADS]
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-2}
BIN=${BIN:-./build/kvtier}
MODEL=${MODEL:-bench/out/llama250m-f16.gguf}
mkdir -p bench/out
[ -f "$MODEL" ] || "$BIN" mkmodel -o "$MODEL" --dim 1024 --layers 16 --heads 16 --kv-heads 4 --ff 2816 \
  --vocab 32000 --type f16 --ctx 4096 --name bench-llama-250m
. bench/redis_lib.sh
KVT_SERVE_ARGS=(-m "$MODEL" --host 127.0.0.1 -t "$T" --ctx 4096)
start_redis 2gb
read -r -a t3_args <<<"${T3_ARGS:-}"
REMOTE+=("${t3_args[@]}")

# a prompt of about 2,048 tokens under this model's tokenizer
words=(cache tier block page restore prefix shared remote disk memory token layer value record server)
make_prompt() { local n=$1 s=""; for ((i = 0; i < n; i++)); do s+="${words[i % ${#words[@]}]}$((i % 97)) "; done; echo "$s"; }
nw=400
while :; do
  PROMPT=$(make_prompt $nw)
  nt=$("$BIN" tokenize -m "$MODEL" "$PROMPT" 2>/dev/null | wc -w)
  [ "$nt" -ge 2048 ] && break
  nw=$((nw * 2048 / (nt > 0 ? nt : 1) + 8))
done
while [ "$nt" -gt 2080 ]; do nw=$((nw - 4)); PROMPT=$(make_prompt $nw); nt=$("$BIN" tokenize -m "$MODEL" "$PROMPT" 2>/dev/null | wc -w); done
BODY=$(jq -n --arg p "$PROMPT" '{prompt: $p, max_tokens: 1, temperature: 0}')

ask() { curl -s -m 600 -H 'Content-Type: application/json' -d "$BODY" "$URL/v1/completions"; }
show() { jq -r "\"\(.kvtier.ttft_ms | floor) ms TTFT; cached T0/T1/T2/T3 \(.kvtier.cached_tokens_by_tier | [.T0,.T1,.T2,.T3] | join(\"/\")), computed \(.kvtier.computed_tokens), restore \(.kvtier.restore_ms * 10 | floor / 10) ms\"" "$1"; }

echo "model $MODEL, prompt $nt tokens, $T threads, Redis on 127.0.0.1:$RPORT"
kvt_start_server A --kv-disk "$TMP/kvA" "${REMOTE[@]}" --write-through
ask >"$TMP/cold.json"
echo "cold (node A computes):   $(show "$TMP/cold.json")"
for _ in $(seq 100); do [ "$(redis-cli -p "$RPORT" dbsize)" -ge $((nt / 32)) ] && break; sleep 0.1; done
# fresh_nodes PREFIX: three fresh nodes on T3, each answers its first request
fresh_nodes() {
  for i in 1 2 3; do
    kvt_start_server "$1$i" "${REMOTE[@]}"
    ask >"$TMP/$1-$i.json"
    curl -s "$URL/v1/cache/stats" >"$TMP/$1-$i.stats"
    echo "T3 (fresh node $1, run $i): $(show "$TMP/$1-$i.json")"
    kvt_stop_server "$1$i" KILL || true
  done
}
fresh_nodes B
kvt_stop_server A || true
kvt_start_server A2 --kv-disk "$TMP/kvA" --restore always
ask >"$TMP/t2.json"
echo "T2 (node A restarted, disk only; page cache warm): $(show "$TMP/t2.json")"

value=$(redis-cli -p "$RPORT" strlen "$(redis-cli -p "$RPORT" --scan --pattern 'kvt:*' | head -1)")
cold=$(jq '.kvtier.ttft_ms' "$TMP/cold.json")
echo "value size: $value bytes (one page and the record header)"
# restore bandwidth of node PREFIX's runs: value bytes read (T3 stats) and payload bytes over restore time
rates() {
  for i in 1 2 3; do
    jq -r --argjson cold "$cold" --argjson page "$((value - 256))" --slurpfile st "$TMP/$1-$i.stats" \
      '"T3 run: TTFT \(.kvtier.ttft_ms / $cold * 1000 | floor / 10)% of cold; restore \($st[0].T3.bytes_read / (.kvtier.restore_ms / 1000) / 1e6 | floor) MB/s of values, \($st[0].T3.restores * $page / (.kvtier.restore_ms / 1000) / 1e6 | floor) MB/s of KV"' "$TMP/$1-$i.json"
  done
}
rates B
echo "T2: TTFT $(jq --argjson cold "$cold" '.kvtier.ttft_ms / $cold * 1000 | floor / 10' "$TMP/t2.json")% of cold"
for args in "-c 1 -P 64" "-c 50"; do
  # set,get: GET needs the key that the SET run writes
  rps=$(redis-benchmark -p "$RPORT" -t set,get -d "$value" -n 2000 $args -q 2>/dev/null | tr '\r' '\n' | grep -o 'GET: [0-9.]*' | tail -1 | grep -o '[0-9.]*$')
  echo "redis-benchmark -t get -d $value $args: $rps GET/s = $(awk -v r="$rps" -v v="$value" 'BEGIN { printf "%.0f", r * v / 1e6 }') MB/s"
done

[ "${ZSTD:-1}" = 0 ] && exit 0
redis-cli -p "$RPORT" flushall >/dev/null
kvt_start_server Z "${REMOTE[@]}" --kv-remote-compress zstd --write-through
ask >"$TMP/zcold.json"
for _ in $(seq 100); do [ "$(redis-cli -p "$RPORT" dbsize)" -ge $((nt / 32)) ] && break; sleep 0.1; done
curl -s "$URL/v1/cache/stats" | jq -r '.T3 | "zstd (node Z writes): \(.compressed_values) values compressed, \(.incompressible_values) stored raw; ratio \(.compression_ratio * 1000 | floor / 1000) (KV bytes / stored bytes)"'
kvt_stop_server Z KILL || true
fresh_nodes Z
rates Z
