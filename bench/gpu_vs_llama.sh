#!/usr/bin/env bash
# kvtier's Vulkan engine against llama.cpp's Vulkan build on the same GPU, the
# same GGUF files and the same clients, in one run:
#  1. single stream, per weight type: prefill of 512 and 2,048 tokens and
#     decode (NGEN tokens after a one-word prompt); kvtier through `kvtier run
#     --device`, llama.cpp through `llama-bench -ngl 99`;
#  2. concurrent serving: for each N in STREAMS, N agent sessions
#     (bench/agent_bench.py, streamed, 2 rounds) against `kvtier serve --device
#     --parallel N` and against `llama-server -ngl 99 -np N`: output tok/s,
#     ITL p50/p99, TTFT p50/p99 of round 0 (cold) and round 1 (resumed);
#  3. partial offload (after the streams, the time allowing): the first OFFLOAD_NGL layers on the
#     GPU and the rest on the CPU, the first weight type's prefill of the first PROMPTS size and
#     decode, `kvtier run -ngl N` against `llama-bench -ngl N`.
# Models are made here by bench_gpu --make-model (bench/out/bench-gpu-SHAPE[-TYPE].gguf).
# Every figure goes to $OUT/vs_figures.txt as key=value lines as it is measured,
# so a run cut short keeps what it did. Numbers only; loopback only.
#
# usage: LLAMA_DIR=DIR bench/gpu_vs_llama.sh   (DIR holds llama-bench and llama-server
#        built with -DGGML_VULKAN=ON; BUILD=build; OUT=bench/out/gpu; DEVICE=vulkan:0;
#        SHAPE=1b; WTYPES="f16 q4_k_m"; PROMPTS="512 2048"; NGEN=128; STREAMS="8 32 64"; LIMIT_S=240:
#        the whole run's seconds, each step skipped when under 20 are left;
#        SESSION_WORDS=400 words of document per session; OFFLOAD_NGL=8, empty to skip step 3)
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
OUT=${OUT:-bench/out/gpu}
DEVICE=${DEVICE:-vulkan:0}
SHAPE=${SHAPE:-1b}
WTYPES=${WTYPES:-f16 q4_k_m}
NGEN=${NGEN:-128}
PROMPTS=${PROMPTS:-512 2048}
STREAMS=${STREAMS-8 32 64} # empty: no serving step
LIMIT_S=${LIMIT_S:-240}
SESSION_WORDS=${SESSION_WORDS:-400}
OFFLOAD_NGL=${OFFLOAD_NGL-8}
LLAMA_DIR=${LLAMA_DIR:?LLAMA_DIR must name the folder of the Vulkan llama-bench and llama-server}
KVT=$BUILD/kvtier
mkdir -p "$OUT"
R=$OUT/vs_figures.txt
: >"$R"
say() { echo "$*" | tee -a "$OUT/vs_llama.log"; }
rec() { echo "$1=$2" >>"$R"; say "  $1 = $2"; }
left() { echo $((LIMIT_S - SECONDS)); }
enough() { [ "$(left)" -ge 20 ] || { say "skipped $1: only $(left) s of LIMIT_S=$LIMIT_S left"; return 1; }; }
for b in "$LLAMA_DIR/llama-bench" "$LLAMA_DIR/llama-server" "$KVT" "$BUILD/bench_gpu"; do
  [ -x "$b" ] || { say "gpu_vs_llama: no $b"; exit 1; }
done
lsrv_pid=
stop_llama() { [ -n "$lsrv_pid" ] && { kill "$lsrv_pid" 2>/dev/null; wait "$lsrv_pid" 2>/dev/null; }; lsrv_pid=; }
KVT_BIN=$KVT # testutil.sh starts kvtier serve from it
. tests/testutil.sh
trap 'stop_llama; kvt_cleanup' EXIT
say "gpu_vs_llama: $(date -u +%FT%TZ), shape $SHAPE, types $WTYPES, streams $STREAMS, limit ${LIMIT_S} s"
"$LLAMA_DIR/llama-bench" --list-devices >"$OUT/llama-devices.txt" 2>&1 || true
say "llama.cpp's devices: $(grep -i vulkan "$OUT/llama-devices.txt" | head -3 | tr '\n' ' ')"

. bench/prompt_lib.sh # make_prompt N FILE
# kvt_run FILE: "prompt_tokens prefill_tok_s decode_tok_s" of one `kvtier run` on the device
KVT_RUN_EXTRA=() # more flags for kvt_run (step 3: -ngl N)
kvt_run() {
  "$KVT" run --device "$DEVICE" -m "$MODEL" -f "$1" -n "$NGEN" --ignore-eos --no-cache --temp 0 -c 4096 "${KVT_RUN_EXTRA[@]}" \
    >/dev/null 2>"$OUT/vs-run.err" || { tail -3 "$OUT/vs-run.err" | tee -a "$OUT/vs_llama.log"; return 1; }
  sed -n 's/.*prompt \([0-9]*\) tokens.*prefill [0-9.]* ms, \([0-9.]*\) tok\/s.*decode \([0-9.]*\) tok\/s.*/\1 \2 \3/p' \
    "$OUT/vs-run.err" | tail -n 1
}

# llama_figs KEY CSV: llama-bench's CSV as llama.KEY.decode_tok_s / llama.KEY.prefill_N_tok_s figures
llama_figs() {
  awk -F, -v t="$1" 'NR == 1 { for (i = 1; i <= NF; i++) { gsub(/"/, "", $i); c[$i] = i } next }
    { gsub(/"/, ""); if ($c["n_gen"] > 0) print "llama." t ".decode_tok_s=" $c["avg_ts"];
      else print "llama." t ".prefill_" $c["n_prompt"] "_tok_s=" $c["avg_ts"] }' "$2" |
    while IFS== read -r k v; do rec "$k" "$v"; done
}

single() { # single TYPE: one weight type's single-stream figures, both engines
  local t=$1 p512 p2048 one r
  MODEL=bench/out/bench-gpu-$SHAPE$([ "$t" = f16 ] || echo "-$t").gguf
  "$BUILD/bench_gpu" --make-model --shape "$SHAPE" --wtype "$t" >>"$OUT/vs_llama.log" 2>&1 || { say "no model $MODEL"; return 1; }
  for n in $PROMPTS; do make_prompt "$n" "$OUT/p$n.txt" || return 1; done
  echo river >"$OUT/p1.txt"
  for f in $(printf 'p%s ' $PROMPTS) p1; do
    enough "kvtier $t $f" || return 0
    r=$(kvt_run "$OUT/$f.txt") || continue
    set -- $r
    case $f in
    p1) rec "kvtier.$t.decode_tok_s" "$3" ;;
    *) rec "kvtier.$t.prefill_${f#p}_tok_s" "$2" ;;
    esac
  done
  enough "llama-bench $t" || return 0
  timeout -k 5 "$(left)" "$LLAMA_DIR/llama-bench" -m "$MODEL" -ngl 99 -p "$(echo $PROMPTS | tr ' ' ,)" -n "$NGEN" -r 2 -o csv \
    >"$OUT/llama-bench-$t.csv" 2>"$OUT/llama-bench-$t.err" || say "llama-bench $t: exit $? (see llama-bench-$t.err)"
  llama_figs "$t" "$OUT/llama-bench-$t.csv"
  grep -m3 -i 'vulkan\|ggml_vulkan' "$OUT/llama-bench-$t.err" | sed 's/^/  llama.cpp: /' | tee -a "$OUT/vs_llama.log"
}

# offload TYPE: partial offload, both engines with the first OFFLOAD_NGL layers on the GPU
offload() {
  local t=$1 n=${PROMPTS%% *} f r
  [ -n "$OFFLOAD_NGL" ] || return 0
  MODEL=bench/out/bench-gpu-$SHAPE$([ "$t" = f16 ] || echo "-$t").gguf
  [ -f "$MODEL" ] && [ -f "$OUT/p$n.txt" ] || { say "offload: no $MODEL or prompt (step 1 did not run)"; return 0; }
  KVT_RUN_EXTRA=(-ngl "$OFFLOAD_NGL")
  for f in "p$n" p1; do
    enough "kvtier -ngl $OFFLOAD_NGL $t $f" || break
    r=$(kvt_run "$OUT/$f.txt") || continue
    set -- $r
    case $f in
    p1) rec "kvtier.$t.ngl$OFFLOAD_NGL.decode_tok_s" "$3" ;;
    *) rec "kvtier.$t.ngl$OFFLOAD_NGL.prefill_${n}_tok_s" "$2" ;;
    esac
  done
  KVT_RUN_EXTRA=()
  grep -a -m1 'layers on the GPU' "$OUT/vs-run.err" | sed 's/^/  kvtier: /' | tee -a "$OUT/vs_llama.log"
  enough "llama-bench -ngl $OFFLOAD_NGL $t" || return 0
  timeout -k 5 "$(left)" "$LLAMA_DIR/llama-bench" -m "$MODEL" -ngl "$OFFLOAD_NGL" -p "$n" -n "$NGEN" -r 1 -o csv \
    >"$OUT/llama-bench-ngl-$t.csv" 2>"$OUT/llama-bench-ngl-$t.err" || say "llama-bench -ngl $OFFLOAD_NGL $t: exit $?"
  llama_figs "$t.ngl$OFFLOAD_NGL" "$OUT/llama-bench-ngl-$t.csv"
}

# serving N: the agent workload, N sessions at once, each engine in turn
round_figs() { # round_figs LABEL FILE: key=value lines of agent_bench's --summary rounds 0 and 1
  python3 - "$1" "$2" <<'EOF' | while IFS== read -r k v; do rec "$k" "$v"; done
import json, sys
label, path = sys.argv[1], sys.argv[2]
for line in open(path):
    r = json.loads(line)
    p = f"{label}.round{r['round']}"
    for k in ("output_tok_s", "itl_p50", "itl_p99", "ttft_p50", "ttft_p99", "computed", "prompt", "wall"):
        print(f"{p}.{k}={r[k]:.4g}" if isinstance(r[k], float) else f"{p}.{k}={r[k]}")
EOF
}
serving() {
  local n=$1 ctx=$(( $1 * 2048 )) port
  MODEL=bench/out/bench-gpu-$SHAPE.gguf
  local wl=(--sessions "$n" --concurrency "$n" --rounds 2 --max-tokens 64 --system-words 200
    --doc-words "$SESSION_WORDS" --tool-words 40)
  enough "kvtier serve, $n streams" || return 0
  rm -f "$OUT/agents-kvtier-$n.jsonl" "$OUT/agents-llama-$n.jsonl"
  KVT_SERVE_WAIT_S=120 KVT_SERVE_LOG_DIR=$OUT kvt_start_server "vs-kvtier-$n" -m "$MODEL" --device "$DEVICE" \
    --host 127.0.0.1 --parallel "$n" -c 2048
  timeout -k 5 "$(left)" python3 bench/agent_bench.py --url "$URL" --label "kvtier-$n" "${wl[@]}" \
    --summary "$OUT/agents-kvtier-$n.jsonl" >>"$OUT/vs_llama.log" 2>&1 || say "kvtier, $n streams: exit $?"
  kvt_stop_server "vs-kvtier-$n" || true
  [ -f "$OUT/agents-kvtier-$n.jsonl" ] && round_figs "kvtier.streams$n" "$OUT/agents-kvtier-$n.jsonl"
  enough "llama-server, $n streams" || return 0
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$LLAMA_DIR/llama-server" -m "$MODEL" --host 127.0.0.1 --port "$port" -ngl 99 -np "$n" -c "$ctx" \
    >"$OUT/llama-server-$n.log" 2>&1 &
  lsrv_pid=$!
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    kill -0 "$lsrv_pid" 2>/dev/null || break
    sleep 0.2
  done
  timeout -k 5 "$(left)" python3 bench/agent_bench.py --url "http://127.0.0.1:$port" --label "llama-$n" "${wl[@]}" \
    --summary "$OUT/agents-llama-$n.jsonl" >>"$OUT/vs_llama.log" 2>&1 || say "llama-server, $n streams: exit $?"
  stop_llama
  [ -f "$OUT/agents-llama-$n.jsonl" ] && round_figs "llama.streams$n" "$OUT/agents-llama-$n.jsonl"
}

for t in $WTYPES; do say "single stream, $t:"; single "$t"; done
for n in $STREAMS; do say "serving, $n streams:"; serving "$n"; done
say "partial offload, -ngl ${OFFLOAD_NGL:-(skipped)}:"; offload "${WTYPES%% *}"
say "gpu_vs_llama: done in ${SECONDS} s; figures in $R"
