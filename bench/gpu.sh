#!/usr/bin/env bash
# The GPU layer on a machine that has a Vulkan driver (e.g. NVIDIA's, which
# installs its own ICD) but none of kvtier's Debian packages: it unpacks the
# Vulkan loader and validation layer carried along as .deb files, lists the
# devices, and runs the GPU tests, writing each phase's results to $OUT as it
# goes (so a run cut short still leaves what it did).
#
# Before leaving a machine that has the packages (Debian/Ubuntu), run
# bench/gpu-pack.sh (below, and docs/gpu.md "On a GPU machine"); or, where the
# GPU machine has kvtier's libraries, fetch the .deb files (no root needed)
# into the folder DEBS names:
#   mkdir -p bench/gpu-debs && (cd bench/gpu-debs && apt-get download libvulkan1 vulkan-validationlayers)
# and carry that folder and the build folder with the tree (both ignored by git).
# Without .deb files it uses the machine's own loader and layers, if any.
#
# Then the benchmark (bench_gpu, built with kvtier): phase 2, the mission's
# numbers on one prefix (cold prefill, warm TTFT from T0/T1/T2 and T3 when a
# Redis is at hand, T1 restore bandwidth against one pinned copy) on a model of
# SHAPE, then phase 3 (expansion: more sessions than T0 holds, against an
# unlimited T0) on SHAPE3, each under a time limit so the whole script ends
# within BUDGET_S. The models are generated on the machine (bench/out/), never
# carried, in the background while the tests run. results.txt gathers the GPU,
# its driver and every figure.
#
# A CUDA image lacks the libraries kvtier links (cJSON, microhttpd, hiredis, ...)
# and a build folder is too big to carry: bench/gpu-pack.sh packs the stripped
# binaries, those libraries, the .deb files and redis into one folder
# (bench/gpu-carry/kvtier-gpu.tar.gz, about 25 MiB); carry bench/gpu-carry and run
# PACK=bench/gpu-carry bench/gpu.sh. (Through the device tool: carry ["bench/gpu-carry"],
# command "PACK=bench/gpu-carry bash bench/gpu.sh", timeout_s 540; its $OUT is then
# where the results go, and they come back.)
#
# usage: bench/gpu.sh   (BUILD=build, DEBS=bench/gpu-debs, OUT=bench/out/gpu by default;
#                        PACK=DIR takes all three from gpu-pack.sh's folder;
#                        VK_ICD_FILENAMES picks a driver, as the loader reads it; without
#                        it and without a manifest in the default folders, NVIDIA's
#                        /usr/local/nvidia/share/vulkan/icd.d is tried)
# Benchmark settings (environment): DEVICE (vulkan:0), SHAPE (8b) and PREFIX
# (2048) for phase 2; SHAPE3 (1b), SESSIONS (48), T0_SESSIONS (8) for phase 3;
# P3_ARGS adds bench_gpu flags to phase 3. SHAPE=tiny makes every default
# small for lavapipe (prefix 128, 6 sessions over a T0 for 2, P3_ARGS
# "--session-tokens 64 --append 16 --gen 2", SHAPE3 tiny). TEST_LIMIT_S (150):
# the most each GPU test may run. BUDGET_S (450): seconds the whole script may
# take (560 with phase 4); phase 2 runs at most P2_MAX_S (240) and leaves phase 3 150 s, phase 3
# at most P3_MAX_S (240), less VS_S when phase 4 runs; phase 3 drops to a smaller shape when under 150 s
# are left, and a phase is skipped when under 30 s are.
# WTYPE (f16; or q8_0, q4_0, q4_k_m, q5_k_m): the generated models' weights for
# phases 2 and 3 (bench_gpu --wtype). Before phase 2, bench_gpu_mm times the
# weight-matrix matmul alone for the types MM_TYPES (f16,q8_0,q4_k,q6_k) on one
# layer of SHAPE, decode and prefill, at most MM_MAX_S (60) seconds, when more
# than 300 s of the budget are left.
# Both print the weight matmul's workgroup shape (tokens per workgroup for
# prefill batches, weight rows per workgroup for decode and for prefill:
# bench_phase2.gpu_mm_toks, gpu_mm_rows, gpu_mm_rows_wide and bench_mm.mm_toks,
# mm_rows, mm_rows_wide in results.txt, a sentence in the summary);
# KVT_VK_MM_TOKS=8|16|32 and KVT_VK_MM_ROWS=1..8 in the environment pick it.
# Then, when more than MMS_SPARE_S (420) s are left, phase mm_shapes times one SHAPE3
# layer's matmuls (MMS_TYPES f16,q4_k; 1 and MMS_TOKENS 512 tokens) at each workgroup
# shape of MM_SHAPES ("1x32 2x32 2x16 4x16 4x8 8x8", rows x tokens) within MMS_MAX_S
# (30) s: mm_shape_RxT.* in results.txt, to pick this device's default.
# The tensor-core F16 matmul (KVT_VK_COOPMAT=1, opt-in): the summary says whether
# the device has it (from info --devices). Where it does, test_gpu_coopmat holds
# it to the subgroup-free kernel and the CPU, and bench_mm times F16 again with and
# without it, alternated (CM_PAIRS, 2, pairs of off, on); bench_mm_cm*.* in results.txt.
# Phase ss times a single stream (`kvtier run`, an SS_PROMPT (512) token prompt,
# SS_GEN (64) tokens) on SHAPE3's model as shipped, with every command list waited
# for (KVT_VK_INFLIGHT=1) and, where the device has them and WTYPE is f16, on the
# tensor cores (KVT_VK_COOPMAT=1), alternated SS_PAIRS (2) times within SS_MAX_S
# (90) s: ss.VARIANT.N.* in results.txt (SHAPE=tiny: 64 tokens, 8, one round). The
# rest of the script runs as shipped.
# Phase 4, when LLAMA_DIR names llama.cpp's Vulkan llama-bench and llama-server
# (or the pack has them, bench/gpu-pack.sh with LLAMA_VK=DIR): bench/gpu_vs_llama.sh,
# kvtier against llama.cpp on the same GPU, models and clients (single stream and
# 8/32/64 concurrent agent sessions) in the last VS_S (150) seconds;
# VS_ARGS="NAME=VALUE ..." passes it settings (STREAMS, WTYPES, PROMPTS, ...).
# REDIS_URL=redis://... adds T3 to phase 2; without it a redis-server on PATH
# is started on 127.0.0.1:REDIS_PORT (6391); NO_REDIS=1 skips T3.
# Numbers only; it never passes or fails on time. Exit status: 0 when every
# phase that ran passed, 1 otherwise (summary.txt says which).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
DEBS=${DEBS:-bench/gpu-debs}
OUT=${OUT:-bench/out/gpu}
mkdir -p "$OUT"
tmps=() # folders this run made under TMPDIR, removed at exit
redis_pid=
stop_redis() { [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null; redis_pid=; }
trap 'stop_redis; [ ${#tmps[@]} -gt 0 ] && rm -rf "${tmps[@]}"' EXIT
# PACK: a folder made by bench/gpu-pack.sh (binaries, the libraries they link, .deb files, redis)
if [ -n "${PACK:-}" ]; then
  if [ -f "$PACK/kvtier-gpu.tar.gz" ]; then
    dir=$(mktemp -d "${TMPDIR:-/tmp}/kvt-gpu-pack.XXXXXX") && tmps+=("$dir")
    tar -xzf "$PACK/kvtier-gpu.tar.gz" -C "$dir" || { echo "gpu.sh: cannot unpack $PACK/kvtier-gpu.tar.gz" >&2; exit 1; }
    PACK=$dir
  fi
  BUILD=$PACK/bin DEBS=$PACK/debs
  # the machine's own copy of a library comes first (its driver may want a newer libstdc++ than
  # ours): only the libraries it lacks are put on LD_LIBRARY_PATH, from a folder of links
  libs=$(mktemp -d "${TMPDIR:-/tmp}/kvt-gpu-libs.XXXXXX") lacked= && tmps+=("$libs")
  for l in "$PACK"/lib/*; do
    n=$(basename "$l")
    if ! ldconfig -p 2>/dev/null | grep -q "^[[:space:]]$n "; then ln -s "$(realpath "$l")" "$libs/$n"; lacked+=" $n"; fi
  done
  export LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} PATH=$PACK/bin:$PATH
fi
SUMMARY=$OUT/summary.txt
DEVICE=${DEVICE:-vulkan:0}
SHAPE=${SHAPE:-8b}
if [ "$SHAPE" = tiny ]; then small=1; else small=0; fi
PREFIX=${PREFIX:-$([ $small = 1 ] && echo 128 || echo 2048)}
SHAPE3=${SHAPE3:-$([ $small = 1 ] && echo tiny || echo 1b)}
SESSIONS=${SESSIONS:-$([ $small = 1 ] && echo 6 || echo 48)}
T0_SESSIONS=${T0_SESSIONS:-$([ $small = 1 ] && echo 2 || echo 8)}
P3_ARGS=${P3_ARGS:-$([ $small = 1 ] && echo "--session-tokens 64 --append 16 --gen 2")}
SS_PROMPT=${SS_PROMPT:-$([ $small = 1 ] && echo 64 || echo 512)}
SS_GEN=${SS_GEN:-$([ $small = 1 ] && echo 8 || echo 64)}
SS_PAIRS=${SS_PAIRS:-$([ $small = 1 ] && echo 1 || echo 2)}
# LLAMA_DIR: llama.cpp's Vulkan llama-bench and llama-server (the pack's llama/ when it has one):
# then phase 4, bench/gpu_vs_llama.sh, gets the last VS_S (150) seconds of a longer budget (560)
[ -z "${LLAMA_DIR:-}" ] && [ -n "${PACK:-}" ] && [ -x "$PACK/llama/llama-server" ] && LLAMA_DIR=$PACK/llama
LLAMA_DIR=${LLAMA_DIR:-}
VS_S=${VS_S:-$([ -n "$LLAMA_DIR" ] && echo 150 || echo 0)}
BUDGET_S=${BUDGET_S:-$([ -n "$LLAMA_DIR" ] && echo 560 || echo 450)}
P2_MAX_S=${P2_MAX_S:-240}
P3_MAX_S=${P3_MAX_S:-240}
WTYPE=${WTYPE:-f16}
MM_TYPES=${MM_TYPES:-f16,q8_0,q4_k,q6_k}
MM_MAX_S=${MM_MAX_S:-60}
MM_SHAPES=${MM_SHAPES:-1x32 2x32 2x16 4x16 4x8 8x8}
MMS_TYPES=${MMS_TYPES:-f16,q4_k}
MMS_TOKENS=${MMS_TOKENS:-$([ $small = 1 ] && echo 33 || echo 512)}
MMS_MAX_S=${MMS_MAX_S:-30}
MMS_SPARE_S=${MMS_SPARE_S:-420}
TEST_LIMIT_S=${TEST_LIMIT_S:-150}
REDIS_PORT=${REDIS_PORT:-6391}
: >"$SUMMARY"
failed=0
note() { echo "$*" | tee -a "$SUMMARY"; }
# phase NAME COMMAND...: runs it into $OUT/NAME.txt, records its exit status at once
phase() {
  local name=$1 rc=0; shift
  "$@" >"$OUT/$name.txt" 2>&1 || rc=$?
  case $rc in
  0) note "$name: ok" ;;
  124 | 137) note "$name: TIMED OUT (exit $rc; what it printed is in $OUT/$name.txt)"; failed=1 ;;
  77) note "$name: skipped ($(grep -i skip "$OUT/$name.txt" | tail -1))" ;;
  *) note "$name: FAILED (exit $rc; see $OUT/$name.txt)"; failed=1 ;;
  esac
  return 0
}

# 1. the machine
{
  date -u
  uname -a
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  echo "ICD files:"; ls /usr/share/vulkan/icd.d /etc/vulkan/icd.d 2>/dev/null
  echo "VK_ICD_FILENAMES=${VK_ICD_FILENAMES:-}"
} >"$OUT/machine.txt" 2>&1
note "machine: $(uname -srm), see $OUT/machine.txt"
[ -n "${PACK:-}" ] && note "pack: binaries from $PACK; libraries this machine lacked, taken from it:${lacked:- none}"
if [ -x "$BUILD/kvtier" ] && ldd "$BUILD/kvtier" | grep -q 'not found'; then
  note "libraries: FAILED, kvtier cannot start here: $(ldd "$BUILD/kvtier" | awk '/not found/ { printf "%s ", $1 }')" \
    "(carry a folder made by bench/gpu-pack.sh and set PACK to it)"
  failed=1
fi
# NVIDIA's driver may install its ICD manifest outside the loader's default folders
if [ -z "${VK_ICD_FILENAMES:-}${VK_DRIVER_FILES:-}" ] &&
  ! ls /usr/share/vulkan/icd.d/*.json /etc/vulkan/icd.d/*.json >/dev/null 2>&1; then
  icd=$(ls /usr/local/nvidia/share/vulkan/icd.d/*.json /usr/local/share/vulkan/icd.d/*.json 2>/dev/null | head -1)
  if [ -n "$icd" ]; then export VK_ICD_FILENAMES=$icd; note "driver: $icd (outside the loader's default folders)"; fi
fi

# 2. the carried loader and validation layer, unpacked into a private root
unpack_deb() { # unpack_deb FILE DIR: with dpkg-deb, else ar and tar
  if command -v dpkg-deb >/dev/null; then dpkg-deb -x "$1" "$2"; return; fi
  local t; t=$(mktemp -d)
  (cd "$t" && ar x "$(realpath "$1")" && tar -xf data.tar.* -C "$2") || return 1
  rm -rf "$t"
}
shopt -s nullglob
debs=("$DEBS"/*.deb)
if [ ${#debs[@]} -gt 0 ]; then
  ROOT=$(mktemp -d "${TMPDIR:-/tmp}/kvt-vulkan-root.XXXXXX") && tmps+=("$ROOT") # not under $OUT: need not come back
  ok=1
  for d in "${debs[@]}"; do unpack_deb "$d" "$ROOT" >>"$OUT/unpack.txt" 2>&1 || ok=0; done
  libdir=$(dirname "$(find "$ROOT" -name 'libvulkan.so.1' | head -1)")
  layers=$(dirname "$(find "$ROOT" -name 'VkLayer_khronos_validation.json' | head -1)")
  [ -n "$libdir" ] && [ "$libdir" != . ] || ok=0
  export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  # the layer manifest names its library without a path: the loader finds it on LD_LIBRARY_PATH
  [ "$layers" != . ] && export VK_LAYER_PATH=$layers
  if [ $ok = 1 ]; then note "unpack: ok (${#debs[@]} .deb files; loader in $libdir, layers in ${VK_LAYER_PATH:-none})"
  else note "unpack: FAILED (see $OUT/unpack.txt)"; failed=1; fi
else
  note "unpack: no .deb files in $DEBS, using the machine's own Vulkan loader and layers"
fi

# the benchmark's models (step 5), made on this machine while the tests run: mkmodel is CPU work
gen_model() { # gen_model SHAPE: in the background; its pid in gen_pid[SHAPE], its output in $OUT/model-SHAPE.txt
  "$BUILD/bench_gpu" --make-model --shape "$1" --wtype "$WTYPE" >"$OUT/model-$1.txt" 2>&1 &
  gen_pid[$1]=$!
}
declare -A gen_pid=()
if [ -x "$BUILD/bench_gpu" ]; then
  gen_model "$SHAPE"
  [ "$SHAPE3" != "$SHAPE" ] && gen_model "$SHAPE3"
fi
wait_model() { # wait_model SHAPE: waits for its generation, when one was started; notes how it went
  local pid=${gen_pid[$1]:-} rc=0
  [ -n "$pid" ] || return 0
  wait "$pid" || rc=$?
  gen_pid[$1]=
  if [ $rc = 0 ]; then note "model $1: ready at ${SECONDS} s ($(grep -h 'generated in' "$OUT/model-$1.txt" || echo 'already there'))"
  else note "model $1: FAILED (exit $rc; see $OUT/model-$1.txt)"; failed=1; fi
}

# 3. the devices, as kvtier sees them (exit 1: none, and why)
phase devices "$BUILD/kvtier" info --devices
sed 's/^/  /' "$OUT/devices.txt" | tee -a "$SUMMARY"
# the tensor-core path (KVT_VK_COOPMAT=1) where DEVICE can take it: only its line of the listing
cm_line=$(awk -v d="${DEVICE#vulkan}" '/^  vulkan:/ { on = ($1 == "vulkan" (d == "" ? ":0" : d)) } on && /cooperative matrices/' \
  "$OUT/devices.txt" | head -1)
if [[ $cm_line == *"KVT_VK_COOPMAT=1"* ]]; then cm=1; note "coopmat: $DEVICE has it; measured with and without below"
else cm=0; note "coopmat: $DEVICE cannot run the tensor-core matmul (${cm_line:-no listing}); not measured"; fi

# 4. the GPU tests, with the validation layer on (any message fails them)
# GPU_TESTS (all of them by default): the first eight always run; the rest (each a few seconds
# on lavapipe) while more than EXTRA_TESTS_S (330) seconds of BUDGET_S are left, so the
# benchmark keeps its time.
left() { echo $((BUDGET_S - SECONDS)); }
EXTRA_TESTS_S=${EXTRA_TESTS_S:-330}
core="test_gpu_device test_gpu_coopmat test_gpu_kernels test_gpu_fwd_kernels test_gpu_quant test_gpu_attention
  test_gpu_engine test_gpu_engine_quant"
GPU_TESTS=${GPU_TESTS:-$(echo $core test_gpu_mm_rows test_gpu_kv_q8 test_gpu_t1 test_gpu_outliers test_gpu_hidden \
  test_gpu_plan test_gpu_offload test_gpu_arch_kernels test_gpu_arch)}
for t in $GPU_TESTS; do
  if ! [[ " $(echo $core) " == *" $t "* ]] && [ "$(left)" -le "$EXTRA_TESTS_S" ]; then
    note "$t: skipped (only $(left) s of BUDGET_S=$BUDGET_S left, EXTRA_TESTS_S=$EXTRA_TESTS_S)"; continue
  fi
  if [ -x "$BUILD/$t" ]; then
    KVT_VK_VALIDATION=1 phase "$t" timeout -k 10 "$TEST_LIMIT_S" "$BUILD/$t"
    grep -h '^gpu' "$OUT/$t.txt" | sed 's/^/  /' | tee -a "$SUMMARY"
  else
    note "$t: FAILED (no $BUILD/$t: build kvtier first)"; failed=1
  fi
done

# 5. the benchmark
smaller() { case $1 in 8b) echo 1b ;; *) echo tiny ;; esac; }
redis=()
if [ "${NO_REDIS:-0}" != 1 ] && [ -n "${REDIS_URL:-}" ]; then
  redis=(--redis "$REDIS_URL")
elif [ "${NO_REDIS:-0}" != 1 ] && command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then
  redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no --maxmemory 8gb \
    --maxmemory-policy allkeys-lru >"$OUT/redis.txt" 2>&1 &
  redis_pid=$!
  for _ in $(seq 100); do redis-cli -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
  if redis-cli -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG; then redis=(--redis "redis://127.0.0.1:$REDIS_PORT")
  else note "redis: did not answer on 127.0.0.1:$REDIS_PORT (see $OUT/redis.txt); T3 not measured"; stop_redis; fi
else
  note "redis: none (REDIS_URL unset and no redis-server); T3 not measured"
fi
# results.txt: the device, then every figure as key=value, phase by phase
RESULTS=$OUT/results.txt
{
  echo "# bench/gpu.sh results, $(date -u +%FT%TZ)"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | sed 's/^/nvidia_smi=/'
} >"$RESULTS"
collect() { # collect PHASE: its key=value lines into results.txt, prefixed with the phase
  grep -E '^[a-z0-9_]+=' "$OUT/$1.txt" | sed "s/^/$1./" >>"$RESULTS"
}
if [ ! -x "$BUILD/bench_gpu" ]; then
  note "bench: FAILED (no $BUILD/bench_gpu: build kvtier first)"; failed=1
else
  # the matmul alone, per weight type (it needs no model)
  lim=$(( $(left) - 300 )); [ $lim -gt "$MM_MAX_S" ] && lim=$MM_MAX_S
  if [ ! -x "$BUILD/bench_gpu_mm" ]; then note "bench_mm: FAILED (no $BUILD/bench_gpu_mm)"; failed=1
  elif [ $lim -lt 20 ]; then note "bench_mm: skipped (only $(left) s of BUDGET_S=$BUDGET_S left)"
  else
    note "bench_mm: types $MM_TYPES, one $SHAPE layer, on $DEVICE, limit ${lim} s"
    phase bench_mm timeout -k 10 "$lim" "$BUILD/bench_gpu_mm" --device "$DEVICE" --shape "$SHAPE" --types "$MM_TYPES"
    collect bench_mm
    grep -E '^device |layer' "$OUT/bench_mm.txt" | grep -v '=' | sed 's/^/  /' | tee -a "$SUMMARY"
    # F16 again, alternated: subgroup-free (KVT_VK_COOPMAT=0), tensor cores (1), CM_PAIRS times
    for i in $(seq 1 "${CM_PAIRS:-2}"); do
      for on in 0 1; do
        [ $cm = 1 ] && [ "$(left)" -gt 330 ] || continue
        name=bench_mm_cm$on.$i
        KVT_VK_COOPMAT=$on phase "$name" timeout -k 10 30 "$BUILD/bench_gpu_mm" --device "$DEVICE" --shape "$SHAPE" \
          --types f16
        collect "$name"
        grep -E 'layer' "$OUT/$name.txt" | grep -v '=' | sed "s/^/  KVT_VK_COOPMAT=$on: /" | tee -a "$SUMMARY"
      done
    done
  fi
  # the weight matmul's workgroup shape (KVT_VK_MM_ROWS x KVT_VK_MM_TOKS; the same bits at every shape) on one SHAPE3
  # layer, decode and a 512-token prefill, only when the budget has room to spare: it tells which default suits
  # this device; a shape over the device's shared memory is refused when the device opens, and noted
  lim=$(( $(left) - MMS_SPARE_S )); [ $lim -gt "$MMS_MAX_S" ] && lim=$MMS_MAX_S
  if [ -x "$BUILD/bench_gpu_mm" ] && [ $lim -ge 15 ]; then
    end=$((SECONDS + lim))
    note "mm_shapes: rows x tokens $MM_SHAPES, types $MMS_TYPES, one $SHAPE3 layer, on $DEVICE, limit ${lim} s"
    for rt in $MM_SHAPES; do
      [ $((end - SECONDS)) -ge 5 ] || { note "mm_shapes: out of time before $rt"; break; }
      name=mm_shape_$rt
      KVT_VK_MM_ROWS=${rt%x*} KVT_VK_MM_TOKS=${rt#*x} timeout -k 5 $((end - SECONDS)) "$BUILD/bench_gpu_mm" \
        --device "$DEVICE" --shape "$SHAPE3" --types "$MMS_TYPES" --tokens "1,$MMS_TOKENS" --reps 3 >"$OUT/$name.txt" 2>&1
      rc=$?
      if [ $rc = 0 ]; then
        collect "$name"
        grep -E 'layer' "$OUT/$name.txt" | grep -v '=' | sed "s/^/  $rt: /" | tee -a "$SUMMARY"
      elif grep -q 'shared memory' "$OUT/$name.txt"; then note "  $rt: not on this device ($(grep -o 'needs [0-9]* bytes[^;]*' "$OUT/$name.txt" | head -1))"
      else note "  $rt: exit $rc, see $OUT/$name.txt"
      fi
    done
  else
    note "mm_shapes: skipped (only $(left) s of BUDGET_S=$BUDGET_S left; it runs with more than $((MMS_SPARE_S + 15)))"
  fi
  # a single stream (`kvtier run`) under each switch worth comparing, alternated: as shipped, with every command
  # list waited for (KVT_VK_INFLIGHT=1: the host records while the device idles, as before lists overlapped) and,
  # on a device that has them with F16 weights, the tensor cores (KVT_VK_COOPMAT=1)
  ss_run() { # ss_run VAR=VALUE: "prompt_tokens prefill_tok_s decode_tok_s" of one kvtier run on SHAPE3's model
    env "$1" timeout -k 5 60 "$BUILD/kvtier" run --device "$DEVICE" -m "$ss_model" -f "$OUT/ss-prompt.txt" \
      -n "$SS_GEN" --ignore-eos --no-cache --temp 0 -c 4096 >/dev/null 2>"$OUT/ss-run.err" || return 1
    sed -n 's/.*prompt \([0-9]*\) tokens.*prefill [0-9.]* ms, \([0-9.]*\) tok\/s.*decode \([0-9.]*\) tok\/s.*/\1 \2 \3/p' \
      "$OUT/ss-run.err" | tail -n 1
  }
  ss_phase() { # ss_phase SECONDS VARIANT...: each VARIANT (name=VAR=VALUE) in turn, SS_PAIRS rounds
    local i v r pt pf dc end=$((SECONDS + $1)); shift
    KVT=$BUILD/kvtier MODEL=$ss_model
    . bench/prompt_lib.sh
    make_prompt "$SS_PROMPT" "$OUT/ss-prompt.txt" || return 1
    for i in $(seq 1 "$SS_PAIRS"); do
      for v in "$@"; do
        [ $SECONDS -lt $end ] || { echo "ss: out of time after $((i - 1)) rounds"; return 0; }
        r=$(ss_run "${v#*=}") || { echo "ss: ${v#*=} failed:"; tail -3 "$OUT/ss-run.err"; return 1; }
        read -r pt pf dc <<<"$r"
        echo "ss.${v%%=*}.$i.prompt_tokens=$pt"; echo "ss.${v%%=*}.$i.prefill_tok_s=$pf"
        echo "ss.${v%%=*}.$i.decode_tok_s=$dc"
      done
    done
  }
  lim=$(( $(left) - 300 )); [ $lim -gt "${SS_MAX_S:-90}" ] && lim=${SS_MAX_S:-90}
  ss_vars=(shipped=KVT_VK_INFLIGHT=2 inflight1=KVT_VK_INFLIGHT=1)
  [ $cm = 1 ] && [ "$WTYPE" = f16 ] && ss_vars+=(coopmat1=KVT_VK_COOPMAT=1)
  if [ $lim -ge 30 ]; then
    wait_model "$SHAPE3"
    ss_model=bench/out/bench-gpu-$SHAPE3$([ "$WTYPE" = f16 ] || echo "-$WTYPE").gguf
    note "ss: single stream on $ss_model, ${ss_vars[*]} alternated, limit ${lim} s"
    phase ss ss_phase "$lim" "${ss_vars[@]}"
    grep -E '^ss\.' "$OUT/ss.txt" >>"$RESULTS"
    grep -E '_tok_s=' "$OUT/ss.txt" | sed 's/^/  /' | tee -a "$SUMMARY"
  else
    note "ss: skipped (only $(left) s of BUDGET_S=$BUDGET_S left)"
  fi
  wait_model "$SHAPE"
  # phase 2 leaves phase 3 at least 150 s; phase 3 takes what is left, less 10 s for the summary
  lim=$(( $(left) - 150 - VS_S )); [ $lim -gt "$P2_MAX_S" ] && lim=$P2_MAX_S
  if [ $lim -lt 30 ]; then note "bench_phase2: skipped (only $(left) s of BUDGET_S=$BUDGET_S left)"
  else
    note "bench_phase2: shape $SHAPE, $WTYPE weights, prefix $PREFIX, on $DEVICE, limit ${lim} s"
    phase bench_phase2 timeout -k 10 "$lim" "$BUILD/bench_gpu" --device "$DEVICE" --shape "$SHAPE" --wtype "$WTYPE" \
      --prefix "$PREFIX" --phase 2 "${redis[@]}"
    collect bench_phase2
    grep -vE '^[a-z0-9_]+=|^bench_gpu:| kvtier: ' "$OUT/bench_phase2.txt" | sed 's/^/  /' | tee -a "$SUMMARY"
  fi
  stop_redis
  wait_model "$SHAPE3"
  lim=$(( $(left) - 10 - VS_S )); [ $lim -gt "$P3_MAX_S" ] && lim=$P3_MAX_S
  shape3=$SHAPE3
  [ $lim -lt 150 ] && shape3=$(smaller "$shape3")
  if [ $lim -lt 30 ]; then note "bench_phase3: skipped (only $(left) s of BUDGET_S=$BUDGET_S left)"
  else
    note "bench_phase3: shape $shape3, $SESSIONS sessions over a T0 for $T0_SESSIONS, on $DEVICE, limit ${lim} s"
    phase bench_phase3 timeout -k 10 "$lim" "$BUILD/bench_gpu" --device "$DEVICE" --shape "$shape3" --wtype "$WTYPE" \
      --prefix "$PREFIX" --phase 3 --sessions "$SESSIONS" --t0-sessions "$T0_SESSIONS" $P3_ARGS
    collect bench_phase3
    grep -vE '^[a-z0-9_]+=|^bench_gpu:| kvtier: ' "$OUT/bench_phase3.txt" | sed 's/^/  /' | tee -a "$SUMMARY"
  fi
fi
# 6. against llama.cpp's Vulkan build, same GPU, same models, same clients
if [ -n "$LLAMA_DIR" ]; then
  lim=$(( $(left) - 10 ))
  if [ $lim -lt 40 ]; then note "vs_llama: skipped (only $(left) s of BUDGET_S=$BUDGET_S left)"
  else
    note "vs_llama: $LLAMA_DIR, on $DEVICE, limit ${lim} s"
    phase vs_llama env LIMIT_S="$lim" LLAMA_DIR="$LLAMA_DIR" BUILD="$BUILD" OUT="$OUT" DEVICE="$DEVICE" SHAPE="$SHAPE3" \
      ${VS_ARGS:-} bash bench/gpu_vs_llama.sh
    sed 's/^/vs_llama./' "$OUT/vs_figures.txt" >>"$RESULTS" 2>/dev/null
    sed 's/^/  /; s/=/ = /' "$OUT/vs_figures.txt" 2>/dev/null | tee -a "$SUMMARY"
  fi
fi
note "results: $RESULTS ($(grep -c = "$RESULTS") figures), ${SECONDS} s in all"
note "gpu.sh: $([ $failed = 0 ] && echo ok || echo FAILED); results in $OUT"
exit $failed
