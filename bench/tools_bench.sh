#!/usr/bin/env bash
# The tool-calling agent benchmark (bench/tools_bench.py: 6 sessions x 6 steps,
# forced tool calls, results sent back) against `kvtier serve --parallel 2`.
# Default model: a random-weight qwen2-shaped model (dim 512, 8 layers) on
# the GPT-2 vocabulary (50k tokens, so the constrained-decoding mask walks a
# real vocabulary); MODEL=... overrides. Loopback only; numbers, never pass/fail.
# API=chat|responses|both picks the agent (tools_bench.py --api); REPS=0 skips
# the constrained-decoding cost.
# usage: bench/tools_bench.sh [SESSIONS] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-bench/out/qwen2-512-gpt2-f16.gguf}
if [ ! -f "$MODEL" ]; then
  mkdir -p "$(dirname "$MODEL")"
  ./build/kvtier mkmodel -o "$MODEL" --arch qwen2 --dim 512 --layers 8 --heads 8 --kv-heads 4 --ff 1408 --type f16 \
    --vocab-from ../shared/vocab/ggml-vocab-gpt-2.gguf
fi
KVT_BIN=./build/kvtier
. tests/testutil.sh
kvt_start_server tools -m "$MODEL" --parallel 2 -t "${THREADS:-2}" -c 8192
python3 bench/tools_bench.py --url "$URL" --sessions "${1:-6}" --steps "${2:-6}" --api "${API:-chat}" --reps "${REPS:-9}"
