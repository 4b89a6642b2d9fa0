#!/usr/bin/env bash
# kvtier serve with a disk tier: a graceful stop (SIGTERM) flushes the cache;
# a restarted server answers the same request from disk (cached_tokens_by_tier
# T2 > 0) with the same greedy completion; /metrics reports the disk tier.
set -u
command -v curl >/dev/null || { echo "SKIP: curl is not installed"; exit 77; }
. "$(dirname "$0")/../testutil.sh"

"$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 --vocab 800 2>/dev/null
KVT_SERVE_ARGS=(-m "$TMP/m.gguf" --host 127.0.0.1 -t 1 --kv-disk "$TMP/kv" --kv-disk-size 64M)
BODY='{"prompt": "A long and fixed system prompt that every request of this service starts with, followed by the question: what is kept on disk?", "max_tokens": 12, "temperature": 0}'
ask() { curl -s -H 'Content-Type: application/json' -d "$BODY" "http://127.0.0.1:$PORT/v1/completions"; }

kvt_start_server srv
ask > "$TMP/r1.json"
check "first answer has text" grep -q '"text"' "$TMP/r1.json"
kvt_stop_server srv
check "graceful stop exits 0" test $? -eq 0
check "the stop flushed the cache" grep -q "flushed the KV cache" "$TMP/srv.log"

kvt_start_server srv --restore always
ask > "$TMP/r2.json"
t2=$(grep -o '"T2":[0-9]*' "$TMP/r2.json" | grep -o '[0-9]*$')
check "after a restart the prompt comes from disk (T2 ${t2:-none})" test "${t2:-0}" -gt 0
text1=$(grep -o '"text":"[^"]*"' "$TMP/r1.json")
text2=$(grep -o '"text":"[^"]*"' "$TMP/r2.json")
check "same completion after the restart" test "$text1" = "$text2"
check "the response reports the restore decision" grep -q '"disk_blocks":"restore"' "$TMP/r2.json"
curl -s "http://127.0.0.1:$PORT/metrics" > "$TMP/metrics.txt"
check "metrics report the disk budget" grep -q 'kvtier_tier_budget_bytes{tier="T2"} [1-9]' "$TMP/metrics.txt"
check "metrics report disk reads" grep -q 'kvtier_disk_bytes_total{direction="read"} [1-9]' "$TMP/metrics.txt"
kvt_stop_server srv

kvt_test_done test_server_disk
