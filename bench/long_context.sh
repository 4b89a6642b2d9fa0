#!/usr/bin/env bash
# Long-context and parallel decode speed on the ~250M llama of bench/speed.sh,
# kvtier against llama.cpp when its binaries are given. Numbers only; nothing
# here passes or fails on time.
#
# usage: bench/long_context.sh [-h]      (settings by environment variable)
#
# What it measures, per weight type, as alternated pairs (kvtier, llama.cpp,
# kvtier, llama.cpp, ...) with the median of each figure and kvtier/llama.cpp:
#   - decode tok/s at an empty context: `kvtier run` of a 1-word prompt, -n NGEN,
#     decode rate from its stats line; llama.cpp: `llama-bench -p 0 -n NGEN`.
#   - for each DEPTH: an empty-context `kvtier run`, then one `kvtier run` of a
#     DEPTH-token prompt with -n NGEN, which gives both the prefill tok/s and the
#     decode tok/s at that depth (its stats line times the prefill and the decode
#     separately); depth_over_empty_DEPTH: the median over pairs of decode at
#     depth / the empty decode just before it. llama.cpp's prefill is
#     `llama-bench -p DEPTH -n 0`. Its decode at depth: with LLAMA_SERVER, one
#     llama-server /completion of the same DEPTH token ids (n_predict NGEN), whose
#     timings.predicted_per_second counts the generated tokens only; without it,
#     derived from `llama-bench -pg DEPTH,NGEN` (prefill then generate, one rate
#     over both) and the pp DEPTH of the same llama-bench call:
#     NGEN / ((DEPTH+NGEN)/pg_rate - DEPTH/pp_rate), a small difference of two
#     large times, so far noisier (b4748's llama-bench has no --depth). With
#     LLAMA_SERVER, llama.cpp's prefill is by default the same request's
#     timings.prompt_per_second (one DEPTH prefill per pair instead of two; the
#     server prefills in llama-bench's default batches, 2048 and ubatch 512);
#     LLAMA_PREFILL=bench takes `llama-bench -p DEPTH -n 0` instead.
#   - parallel decode: `kvtier serve --parallel PAR`, 1 client then PAR clients at
#     once (each a short prompt and PAR_TOKENS generated tokens), aggregate tok/s
#     = generated tokens / wall time, and the PAR/1 ratio; llama-server -np PAR
#     the same when LLAMA_SERVER is set. Everything on 127.0.0.1.
#
# Settings (environment):
#   THREADS=2                 threads for both engines
#   LLAMA_THREADS=THREADS     llama.cpp's threads when they should differ (on an
#                             oversubscribed machine its 2-thread barriers can
#                             stall far more than one thread; say which ran)
#   TYPES="q8_0 q4_k_m"       weight types (any `kvtier mkmodel --type`)
#   DEPTHS="8192 32768"       prompt lengths in tokens
#   PAIRS=3                   alternated pairs per figure
#   PAIRS_LONG=2              pairs for depths above 8192 (a 32k prefill takes minutes)
#   NGEN=128                  tokens generated for the decode figures (llama-bench's tg128)
#   PAR=4 PAR_TOKENS=64       parallel sequences and tokens each
#   QUICK=1                   a short run: TYPES=q8_0 DEPTHS=8192 PAIRS=2 NGEN=32
#                             PAR_TOKENS=32 (each still overridable)
#   LLAMA_BENCH=/path/llama-bench, LLAMA_SERVER=/path/llama-server: llama.cpp's
#                             binaries (optional; without them kvtier's figures only)
#   LLAMA_FA=0                1: llama.cpp with flash attention (llama-bench -fa 1,
#                             llama-server -fa); 0: without (both tools' default)
#   LLAMA_PREFILL=server      where llama.cpp's prefill at depth comes from when
#                             LLAMA_SERVER is set: server or bench (see above)
#   PARTS="empty depth par"   which figures to take (a subset runs faster)
#   LPORT=8097                llama-server's port (kvtier serve picks a free one)
#   KVT_BIN=./build/kvtier    the kvtier binary
# The models: bench/out/llama250m-TYPE-ctx32k.gguf, made as bench/speed.sh makes
# its model (same shape and name) but with a 33,024-token context_length so that
# both engines accept 32k prompts. Logs and raw figures: bench/out/long_context/.
set -euo pipefail
cd "$(dirname "$0")/.."
case ${1:-} in -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;; esac
[ $# -eq 0 ] || { echo "bench/long_context.sh: no arguments are taken (settings are environment variables; -h)" >&2; exit 2; }
if [ "${QUICK:-0}" = 1 ]; then
  : "${TYPES:=q8_0}" "${DEPTHS:=8192}" "${PAIRS:=2}" "${NGEN:=32}" "${PAR_TOKENS:=32}"
fi
T=${THREADS:-2} NGEN=${NGEN:-128} PAR=${PAR:-4} PAR_TOKENS=${PAR_TOKENS:-64}
TYPES=${TYPES:-q8_0 q4_k_m} DEPTHS=${DEPTHS:-8192 32768} PAIRS=${PAIRS:-3} PAIRS_LONG=${PAIRS_LONG:-2}
LPORT=${LPORT:-8097} CTX=33024 LLAMA_FA=${LLAMA_FA:-0} LLAMA_PREFILL=${LLAMA_PREFILL:-server}
PARTS=${PARTS:-empty depth par} LT=${LLAMA_THREADS:-$T}
[[ $LLAMA_FA =~ ^[01]$ ]] || { echo "bench/long_context.sh: LLAMA_FA must be 0 or 1, got '$LLAMA_FA'" >&2; exit 2; }
[[ $LLAMA_PREFILL =~ ^(server|bench)$ ]] ||
  { echo "bench/long_context.sh: LLAMA_PREFILL must be server or bench, got '$LLAMA_PREFILL'" >&2; exit 2; }
for p in $PARTS; do
  [[ $p =~ ^(empty|depth|par)$ ]] || { echo "bench/long_context.sh: PARTS: '$p' is not empty, depth or par" >&2; exit 2; }
done
part() { [[ " $PARTS " == *" $1 "* ]]; }
LFA_BENCH=() LFA_SERVER=()
[ "$LLAMA_FA" = 0 ] || LFA_BENCH=(-fa 1) LFA_SERVER=(-fa)
for v in T LT NGEN PAR PAR_TOKENS PAIRS PAIRS_LONG LPORT; do
  name=$v
  case $v in T) name=THREADS ;; LT) name=LLAMA_THREADS ;; esac
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "bench/long_context.sh: $name must be a positive integer, got '${!v}'" >&2; exit 2; }
done
for d in $DEPTHS; do
  [[ $d =~ ^[1-9][0-9]*$ && $d -le $((CTX - NGEN - 8)) ]] ||
    { echo "bench/long_context.sh: DEPTHS: '$d' is not a token count in 1..$((CTX - NGEN - 8))" >&2; exit 2; }
done
for b in LLAMA_BENCH LLAMA_SERVER; do
  [ -z "${!b:-}" ] || [ -x "${!b}" ] || { echo "bench/long_context.sh: $b=${!b} is not an executable" >&2; exit 2; }
done
KVT=${KVT_BIN:-./build/kvtier}
[ -x "$KVT" ] || { echo "bench/long_context.sh: build kvtier first (scripts/build.sh)" >&2; exit 2; }
OUT=bench/out/long_context
mkdir -p "$OUT"
RAW=$OUT/raw.tsv # type, figure, engine, value
: >"$RAW"
KVT_BIN=$KVT # testutil.sh starts kvtier serve from it
. tests/testutil.sh
KVT_SERVE_WAIT_S=300 KVT_SERVE_LOG_DIR=$OUT
LSRV_PID=
cleanup_llama() { [ -z "$LSRV_PID" ] || { kill "$LSRV_PID" 2>/dev/null; wait "$LSRV_PID" 2>/dev/null || true; }; LSRV_PID=; }
trap 'cleanup_llama; kvt_cleanup' EXIT

rec() { printf '%s\t%s\t%s\t%s\n' "$TYPE" "$1" "$2" "$3" >>"$RAW"; echo "  $TYPE $1 $2: $3"; }
load() { uptime | sed 's/.*load average: /load /'; }

. bench/prompt_lib.sh # make_prompt N FILE

# kvtier run of FILE with NGEN tokens: "prompt_tokens prefill_tok_s decode_tok_s"
kvt_run() {
  "$KVT" run -m "$MODEL" -f "$1" -n "$NGEN" --ignore-eos --no-cache --temp 0 -t "$T" -c "$CTX" \
    >/dev/null 2>"$OUT/run.err" || { cat "$OUT/run.err" >&2; return 1; }
  sed -n 's/.*prompt \([0-9]*\) tokens.*prefill [0-9.]* ms, \([0-9.]*\) tok\/s.*decode \([0-9.]*\) tok\/s.*/\1 \2 \3/p' \
    "$OUT/run.err" | tail -n 1
}

# llama-bench ARGS...: the avg_ts of each test line, "n_prompt n_gen avg_ts" per line
lbench() {
  "$LLAMA_BENCH" -m "$MODEL" -t "$LT" -r 1 "${LFA_BENCH[@]}" -o csv "$@" 2>"$OUT/llama-bench.err" | awk -F, '
    NR == 1 { for (i = 1; i <= NF; i++) { gsub(/"/, "", $i); c[$i] = i } next }
    { gsub(/"/, ""); print $c["n_prompt"], $c["n_gen"], $c["avg_ts"] }'
}

start_llama_server() { # start_llama_server NP CTX
  cleanup_llama
  "$LLAMA_SERVER" -m "$MODEL" --host 127.0.0.1 --port "$LPORT" -t "$LT" -np "$1" -c "$2" "${LFA_SERVER[@]}" \
    >"$OUT/llama-server-$TYPE.log" 2>&1 &
  LSRV_PID=$!
  for _ in $(seq 1 1500); do
    curl -sf "http://127.0.0.1:$LPORT/health" >/dev/null 2>&1 && return 0
    kill -0 "$LSRV_PID" 2>/dev/null || break
    sleep 0.2
  done
  echo "llama-server did not start:" >&2; tail -20 "$OUT/llama-server-$TYPE.log" >&2; return 1
}

# llama-server decode at depth: the ids of FILE.ids as the prompt; "prefill_tok_s decode_tok_s"
lsrv_depth() {
  jq -Rc --argjson n "$NGEN" '{prompt: (split(" ") | map(tonumber)), n_predict: $n, ignore_eos: true,
    temperature: 0, cache_prompt: false}' <"$1.ids" >"$OUT/req.json"
  curl -s -m 3600 -H 'Content-Type: application/json' -d @"$OUT/req.json" "http://127.0.0.1:$LPORT/completion" |
    jq -r '"\(.timings.prompt_per_second) \(.timings.predicted_per_second)"'
}

# aggregate tok/s of N concurrent /v1/completions against BASE_URL, PAR_TOKENS each
par_rate() {
  python3 - "$1" "$2" "$PAR_TOKENS" <<'EOF'
import json, sys, threading, time, urllib.request
url, n, toks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
got = [0] * n
def one(i):
    body = json.dumps({"prompt": "Client %d writes a short story about the sea and a boat:" % i, "max_tokens": toks,
                       "ignore_eos": True, "temperature": 0}).encode()
    req = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
    r = json.load(urllib.request.urlopen(req, timeout=1800))
    got[i] = (r.get("usage") or {}).get("completion_tokens") or (r.get("timings") or {}).get("predicted_n") or 0
th = [threading.Thread(target=one, args=(i,)) for i in range(n)]
t0 = time.monotonic()
for t in th: t.start()
for t in th: t.join()
print("%.2f" % (sum(got) / (time.monotonic() - t0)))
EOF
}

echo "long_context: THREADS=$T LLAMA_THREADS=$LT TYPES='$TYPES' DEPTHS='$DEPTHS' PAIRS=$PAIRS PAIRS_LONG=$PAIRS_LONG NGEN=$NGEN" \
  "PAR=$PAR PAR_TOKENS=$PAR_TOKENS PARTS='$PARTS' llama-bench=${LLAMA_BENCH:-none} llama-server=${LLAMA_SERVER:-none}" \
  "LLAMA_FA=$LLAMA_FA LLAMA_PREFILL=$LLAMA_PREFILL"
echo "start: $(date -u '+%F %T UTC'), $(load); $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
for TYPE in $TYPES; do
  MODEL=bench/out/llama250m-$TYPE-ctx32k.gguf
  [ -f "$MODEL" ] || "$KVT" mkmodel -o "$MODEL" --dim 1024 --layers 16 --heads 16 --kv-heads 4 --ff 2816 \
    --vocab 32000 --type "$TYPE" --ctx "$CTX" --name bench-llama-250m >"$OUT/mkmodel.log" 2>&1 ||
    { cat "$OUT/mkmodel.log" >&2; exit 1; }
  echo "== $TYPE ($MODEL)"
  echo "hello" >"$OUT/p0.txt"
  part depth && [ -n "${LLAMA_SERVER:-}" ] && start_llama_server 1 "$CTX"
  part empty && for i in $(seq 1 "$PAIRS"); do
    read -r _ _ dec < <(kvt_run "$OUT/p0.txt")
    rec decode_empty kvtier "$dec"
    if [ -n "${LLAMA_BENCH:-}" ]; then
      read -r _ _ ts < <(lbench -p 0 -n "$NGEN")
      rec decode_empty llama "$ts"
    fi
    echo "  pair $i: $(load)"
  done
  part depth && for d in $DEPTHS; do
    make_prompt "$d" "$OUT/p$d.txt"
    np=$PAIRS
    [ "$d" -le 8192 ] || np=$PAIRS_LONG
    for i in $(seq 1 "$np"); do
      # an empty-context decode right before, so that depth/empty compares runs at about the same load
      read -r _ _ e < <(kvt_run "$OUT/p0.txt")
      rec decode_empty kvtier "$e"
      read -r n pre dec < <(kvt_run "$OUT/p$d.txt")
      rec "prefill_$d" kvtier "$pre"
      rec "decode_at_$d" kvtier "$dec"
      rec "depth_over_empty_$d" kvtier "$(awk -v a="$dec" -v b="$e" 'BEGIN { printf "%.3f", (b > 0 ? a / b : 0) }')"
      [ "$i" -gt 1 ] || echo "  (kvtier prompt: $n tokens)"
      if [ -n "${LLAMA_SERVER:-}" ]; then
        read -r lpre ldec < <(lsrv_depth "$OUT/p$d.txt")
        rec "decode_at_$d" llama "$ldec"
        if [ "$LLAMA_PREFILL" = bench ] && [ -n "${LLAMA_BENCH:-}" ]; then
          read -r _ _ ts < <(lbench -p "$d" -n 0)
          rec "prefill_$d" llama "$ts"
        else
          rec "prefill_$d" llama "$lpre"
        fi
      elif [ -n "${LLAMA_BENCH:-}" ]; then
        lbench -p "$d" -n 0 -pg "$d,$NGEN" >"$OUT/lb.txt"
        pp=$(awk '$2 == 0 { print $3 }' "$OUT/lb.txt") pg=$(awk '$2 > 0 { print $3 }' "$OUT/lb.txt")
        rec "prefill_$d" llama "$pp"
        rec "decode_at_$d" llama "$(awk -v d="$d" -v g="$NGEN" -v pp="$pp" -v pg="$pg" \
          'BEGIN { t = (d + g) / pg - d / pp; printf "%.2f", (t > 0 ? g / t : 0) }')"
      fi
      echo "  pair $i: $(load)"
    done
  done
  cleanup_llama
  part par || continue
  # parallel decode: both servers up, the requests alternate between them
  kvt_start_server "serve-$TYPE" -m "$MODEL" --host 127.0.0.1 --parallel "$PAR" -t "$T" -c 4096
  [ -z "${LLAMA_SERVER:-}" ] || start_llama_server "$PAR" $((4096 * PAR))
  for i in $(seq 1 "$PAIRS"); do
    rec par1 kvtier "$(par_rate "$URL" 1)"
    rec "par$PAR" kvtier "$(par_rate "$URL" "$PAR")"
    if [ -n "${LLAMA_SERVER:-}" ]; then
      rec par1 llama "$(par_rate "http://127.0.0.1:$LPORT" 1)"
      rec "par$PAR" llama "$(par_rate "http://127.0.0.1:$LPORT" "$PAR")"
    fi
    echo "  pair $i: $(load)"
  done
  kvt_stop_server "serve-$TYPE" || true
  cleanup_llama
done
echo "end: $(date -u '+%F %T UTC'), $(load)"

# medians per type and figure, kvtier/llama.cpp, decode at depth / empty, PAR/1
python3 - "$RAW" "$PAR" "${LLAMA_SERVER:+server}" <<'EOF'
import sys, statistics as st, collections
raw, par, lsrv = sys.argv[1], sys.argv[2], sys.argv[3]
v = collections.defaultdict(list)
for line in open(raw):
    t, fig, eng, x = line.rstrip("\n").split("\t")
    try: v[(t, fig, eng)].append(float(x))
    except ValueError: pass
med = {k: st.median(x) for k, x in v.items() if x}
print("\nmedians (tok/s) [min-max, runs]; ratio = kvtier / llama.cpp")
for t in dict.fromkeys(k[0] for k in v):
    print("== " + t)
    for fig in dict.fromkeys(k[1] for k in v if k[0] == t):
        row = []
        for eng in ("kvtier", "llama"):
            x = v.get((t, fig, eng))
            if x: row.append("%s %.2f [%.2f-%.2f, %d]" % (eng, med[(t, fig, eng)], min(x), max(x), len(x)))
        r = ""
        if (t, fig, "llama") in med and med[(t, fig, "llama")] > 0:
            r = "  ratio %.2f" % (med[(t, fig, "kvtier")] / med[(t, fig, "llama")])
        print("  %-16s %s%s" % (fig, "; ".join(row), r))
    for eng in ("kvtier", "llama"):
        e = med.get((t, "decode_empty", eng))
        for fig in sorted(k[1] for k in med if k[0] == t and k[2] == eng and k[1].startswith("decode_at_")):
            if e: print("  %s %s / decode_empty: %.2f" % (eng, fig, med[(t, fig, eng)] / e))
        one, many = med.get((t, "par1", eng)), med.get((t, "par" + par, eng))
        if one and many: print("  %s aggregate %s / 1 sequence: %.2f" % (eng, par, many / one))
    if med.get((t, "par" + par, "llama")):
        print("  aggregate %s: kvtier / llama-server: %.2f" % (par, med[(t, "par" + par, "kvtier")] / med[(t, "par" + par, "llama")]))
if any(k[2] == "llama" and k[1].startswith("decode_at_") for k in v):
    print("llama.cpp decode at depth: " + ("llama-server timings.predicted_per_second" if lsrv else
          "derived from llama-bench -pg and -p of the same call (noisy)"))
EOF
