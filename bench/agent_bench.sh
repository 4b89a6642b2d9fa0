#!/usr/bin/env bash
# Runs the multi-session agent workload (bench/agent_bench.py) against
# `kvtier serve --parallel 2` on the ~250M llama, and against llama.cpp's
# llama-server (2 slots, 16k context) when LLAMA_SERVER points to its binary.
# Loopback only; prints numbers, never pass/fail.
# usage: bench/agent_bench.sh [MODEL.gguf]
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-bench/out/llama250m-spm-f16.gguf}
PORT=${PORT:-8090}
if [ ! -f "$MODEL" ]; then
  vocab=../shared/vocab/ggml-vocab-llama-spm.gguf
  extra=()
  [ -f "$vocab" ] && extra=(--vocab-from "$vocab")
  mkdir -p "$(dirname "$MODEL")"
  ./build/kvtier mkmodel -o "$MODEL" --dim 1024 --layers 16 --heads 16 --kv-heads 4 --ff 2816 --vocab 32000 \
    --type f16 --ctx 16384 "${extra[@]}"
fi
wait_up() { for _ in $(seq 1 600); do curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0; sleep 0.2; done; return 1; }

KVT_BIN=./build/kvtier
. tests/testutil.sh
# the server's log stays in /tmp/kvtier-agent-bench.log
KVT_SERVE_WAIT_S=120 KVT_SERVE_LOG_DIR=/tmp kvt_start_server kvtier-agent-bench -m "$MODEL" --host 127.0.0.1 \
  --port "$PORT" --parallel 2 -t 2 --ctx 16384
python3 bench/agent_bench.py --url "$URL" --label kvtier
kvt_stop_server kvtier-agent-bench || true

if [ -n "${LLAMA_SERVER:-}" ]; then
  "$LLAMA_SERVER" -m "$MODEL" --host 127.0.0.1 --port $((PORT + 1)) -np 2 -c 16384 -t 2 >/tmp/llama-agent-bench.log 2>&1 &
  lpid=$!
  trap 'kill $lpid 2>/dev/null || true; kvt_cleanup' EXIT
  wait_up $((PORT + 1))
  python3 bench/agent_bench.py --url "http://127.0.0.1:$((PORT + 1))" --label llama.cpp
  kill $lpid
fi
