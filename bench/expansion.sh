#!/usr/bin/env bash
# KV expansion under pressure (issue: every live session's KV survives in RAM
# and on SSD and comes back). A round-robin agent workload over HTTP
# (bench/agent_bench.py: a shared ~300-word system prompt, a ~600-word document
# per session, ~60 new words per step, 16 generated tokens, 3 rounds) on the
# ~250M llama, `kvtier serve --parallel 2`:
#   - 12, 24 and 48 sessions over a T0 sized for about 4 sessions, a T1 for 4
#     more, the rest on disk;
#   - the same sessions with an unlimited T0 (everything stays active);
#   - llama.cpp's llama-server (-np 2) on the same model when LLAMA_SERVER=
#     points to its binary (SESSIONS_LLAMA, default 12, to bound the time).
# Prints per round: prompt tokens computed, resumed TTFT p50/p99, wall time,
# cached tokens by tier; per run: dropped disk writes, discarded blocks and
# shortfalls; then the ratios against their targets (computed tokens and TTFT
# against an unlimited cache, and against llama.cpp). Loopback only;
# numbers, never pass/fail.
# usage: bench/expansion.sh [SESSIONS...]   (default: 12 24 48)
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-bench/out/llama250m-spm-f16.gguf}
LPORT=${PORT:-8092}  # llama-server's ($PORT); kvtier picks a free port
T=${THREADS:-2}
SESSIONS=("${@:-12 24 48}")
read -r -a SESSIONS <<<"${SESSIONS[*]}"
KV_ACTIVE=${KV_ACTIVE:-96M}   # ~4 sessions of ~1,200 tokens at 16 KiB/token (plus the running ones)
KV_RAM=${KV_RAM:-80M}         # ~4 more
OUT=bench/out/expansion
mkdir -p "$OUT"
rm -f "$OUT"/summary.jsonl "$OUT"/runs.txt
if [ ! -f "$MODEL" ]; then
  vocab=../shared/vocab/ggml-vocab-llama-spm.gguf
  extra=()
  [ -f "$vocab" ] && extra=(--vocab-from "$vocab")
  ./build/kvtier mkmodel -o "$MODEL" --dim 1024 --layers 16 --heads 16 --kv-heads 4 --ff 2816 --vocab 32000 \
    --type f16 --ctx 16384 "${extra[@]}"
fi
wait_up() { for _ in $(seq 1 600); do curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0; sleep 0.2; done; return 1; }
KVT_BIN=./build/kvtier
. tests/testutil.sh
KVT_SERVE_WAIT_S=120 KVT_SERVE_LOG_DIR=$OUT # the server logs stay in $OUT
KVT_SERVE_ARGS=(-m "$MODEL" --host 127.0.0.1 --parallel 2 -t "$T" --ctx 4096)
WORKLOAD=(--rounds 3 --system-words 300 --doc-words 600 --tool-words 60 --max-tokens 16 --concurrency 2)

run_kvtier() { # LABEL SESSIONS serve-args...
  local label=$1 n=$2; shift 2
  local dir; dir=$(mktemp -d /var/tmp/kvtier-expansion.XXXXXX)
  kvt_start_server "$label-$n" "$@" --kv-disk "$dir/kv" --kv-disk-size 4G
  grep 'KV capacity' "$OUT/$label-$n.log" || true
  python3 bench/agent_bench.py --url "$URL" --label "$label" --sessions "$n" "${WORKLOAD[@]}" \
    --kvtier-sessions --summary "$OUT/summary.jsonl" | grep -v ' session '
  curl -s "$URL/v1/cache/stats" | jq -r --arg l "$label-$n" \
    '"[\($l)] dropped writes \(.T2.writes_dropped), waited \(.T2.writes_waited), discarded \(.discarded_blocks), shortfalls \(.shortfalls | tostring), T2 records \(.T2.records), warm sessions \(.warm_sessions)"' |
    tee -a "$OUT/runs.txt"
  kvt_stop_server "$label-$n" || true
  rm -rf "$dir"
}

for n in "${SESSIONS[@]}"; do
  run_kvtier tiered "$n" --kv-active "$KV_ACTIVE" --kv-ram "$KV_RAM"
  run_kvtier unlimited "$n" --kv-active 4G
done

if [ -n "${LLAMA_SERVER:-}" ]; then
  n=${SESSIONS_LLAMA:-12}
  "$LLAMA_SERVER" -m "$MODEL" --host 127.0.0.1 --port "$LPORT" -np 2 -c 16384 -t "$T" >"$OUT/llama.log" 2>&1 &
  lpid=$!
  trap "kill $lpid 2>/dev/null || true; kvt_cleanup" EXIT
  wait_up "$LPORT"
  python3 bench/agent_bench.py --url "http://127.0.0.1:$LPORT" --label llama.cpp --sessions "$n" "${WORKLOAD[@]}" \
    --summary "$OUT/summary.jsonl" | grep -v ' session '
  kill "$lpid"; wait "$lpid" 2>/dev/null || true
fi

python3 - "$OUT/summary.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {(r["label"], r["sessions"], r["round"]): r for r in rows}
print("\nsessions | run | round | computed | TTFT p50 | TTFT p99 | wall s | cached by tier")
for r in rows:
    print(f'{r["sessions"]} | {r["label"]} | {r["round"]} | {r["computed"]} | {r["ttft_p50"]:.2f} | '
          f'{r["ttft_p99"]:.2f} | {r["wall"]:.1f} | {r["tiers"]}')
print("\nratios (targets: computed <= 1.15x unlimited, TTFT p50 <= 1.5x unlimited; vs llama.cpp: TTFT >= 8x lower, wall >= 5x lower)")
for (label, n, rnd), r in sorted(by.items()):
    if label != "tiered" or rnd == 0:
        continue
    u = by.get(("unlimited", n, rnd))
    if u:
        print(f"{n} sessions, round {rnd}: computed {r['computed'] / max(u['computed'], 1):.2f}x unlimited, "
              f"TTFT p50 {r['ttft_p50'] / max(u['ttft_p50'], 1e-9):.2f}x unlimited")
    l = by.get(("llama.cpp", n, rnd))
    if l:
        print(f"{n} sessions, round {rnd}: llama.cpp TTFT p50 / kvtier = {l['ttft_p50'] / max(r['ttft_p50'], 1e-9):.1f}x, "
              f"wall {l['wall'] / max(r['wall'], 1e-9):.1f}x")
PY
cat "$OUT/runs.txt"
