#!/usr/bin/env bash
# The tool-calling agent benchmark (bench/tools_bench.py: 6 sessions x 6 steps,
# forced tool calls, results sent back) against `kvtier serve --parallel 2`.
# Default model: a random-weight qwen2-shaped model (dim 512, 8 layers) on
# the GPT-2 vocabulary (50k tokens, so the constrained-decoding mask walks a
# real vocabulary); MODEL=... overrides. Loopback only; numbers, never pass/fail.
# usage: bench/tools_bench.sh [SESSIONS] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-bench/out/qwen2-512-gpt2-f16.gguf}
if [ ! -f "$MODEL" ]; then
  mkdir -p "$(dirname "$MODEL")"
  ./build/kvtier mkmodel -o "$MODEL" --arch qwen2 --dim 512 --layers 8 --heads 8 --kv-heads 4 --ff 1408 --type f16 \
    --vocab-from ../shared/vocab/ggml-vocab-gpt-2.gguf
fi
LOG=$(mktemp)
./build/kvtier serve -m "$MODEL" --host 127.0.0.1 --port 0 --parallel 2 -t "${THREADS:-2}" -c 8192 >"$LOG" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -f "$LOG"' EXIT
URL=
for _ in $(seq 300); do
  URL=$(grep -o 'listening on http://[^ ]*:[0-9]*' "$LOG" | sed 's/listening on //') && [ -n "$URL" ] && break
  sleep 0.2
done
[ -n "$URL" ] || { cat "$LOG"; exit 1; }
python3 bench/tools_bench.py --url "$URL" --sessions "${1:-6}" --steps "${2:-6}"
