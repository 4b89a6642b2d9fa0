#!/usr/bin/env bash
# Speed report for the engine and the cache tiers on the ~250M llama of the
# issues, made with `kvtier mkmodel` (dim 1024, 16 layers, 16/4 heads, ff 2816,
# vocab 32000; F16, or the weight type given: q8_0, q4_k_m, ...). Prints kvtier's
# prefill (512, 2048) and decode tok/s,
# TTFT cold vs warm from T0/T1/T2, T2 restore vs sequential read bandwidth, the
# quality and speed cost of q8_0 KV against f16 (bench_kv_q8);
# with LLAMA_BENCH=/path/to/llama-bench, llama.cpp's figures on the same model
# and the ratios. Numbers only; nothing here passes or fails on time.
# usage: bench/speed.sh [THREADS] [TYPE]   (TYPE: any `kvtier mkmodel --type`, default f16;
# llama-bench then runs on the same file)
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-2}
TYPE=${2:-f16}
MODEL=bench/out/llama250m-$TYPE.gguf
mkdir -p bench/out
[ -f "$MODEL" ] || ./build/kvtier mkmodel -o "$MODEL" --dim 1024 --layers 16 --heads 16 --kv-heads 4 --ff 2816 \
  --vocab 32000 --type "$TYPE" --ctx 4096 --name bench-llama-250m
./build/bench_engine -m "$MODEL" -t "$T" | tee /tmp/kvtier-speed.txt
# the cost of --kv-type q8_0 against f16: bytes per token, logit deviation, top-1 agreement, speed
./build/bench_kv_q8 -m "$MODEL" -m ../shared/models/tiny-llama-f16.gguf -t "$T" | tee /tmp/kvtier-kv-q8.txt
if [ -n "${LLAMA_BENCH:-}" ]; then
  "$LLAMA_BENCH" -m "$MODEL" -p 512,2048 -n 64 -t "$T" -r 2 -o csv 2>/dev/null | tee /tmp/llama-speed.csv
  awk -F, -v k512="$(sed -n 's/prefill  512 tokens: *\([0-9.]*\).*/\1/p' /tmp/kvtier-speed.txt)" \
          -v k2048="$(sed -n 's/prefill 2048 tokens: *\([0-9.]*\).*/\1/p' /tmp/kvtier-speed.txt)" \
          -v kdec="$(sed -n 's/decode *[0-9]* tokens: *\([0-9.]*\).*/\1/p' /tmp/kvtier-speed.txt)" '
    NR == 1 { for (i = 1; i <= NF; i++) { gsub(/"/, "", $i); col[$i] = i } next }
    { gsub(/"/, ""); p = $col["n_prompt"]; g = $col["n_gen"]; ts = $col["avg_ts"]
      if (p == 512) printf "ratio prefill  512: %.2f (kvtier %s / llama.cpp %.1f)\n", k512 / ts, k512, ts
      if (p == 2048) printf "ratio prefill 2048: %.2f (kvtier %s / llama.cpp %.1f)\n", k2048 / ts, k2048, ts
      if (g > 0) printf "ratio decode:       %.2f (kvtier %s / llama.cpp %.1f)\n", kdec / ts, kdec, ts }' /tmp/llama-speed.csv
fi
