#!/usr/bin/env bash
# Soak: runs `kvtier serve` under mixed load for N minutes and checks that it
# stays flat: resident memory and open file descriptors after warm-up, no
# server errors (5xx, failed connections), the same greedy answer to a fixed
# probe prompt all along. With --kill-every S it also kill -9s the server every
# S seconds and restarts it on the same disk-tier directory: each restart must
# come up and answer the probe identically, and find every record the killed
# process left on disk (`cache ls` after the kill against the open's count,
# less what the open lets go to fit the budget).
# With --disk-full-every S the disk-tier directory lives on a small filesystem
# of its own (--disk-fs-mib, default 96: a loop-mounted ext4 image when run as
# root, else a size-limited tmpfs; without root, only a filesystem the cache
# directory is already on with at most 4 GiB free, say --keep DIR on one), and
# about every S seconds (at random, 0.5-1.5 S) a filler file takes all its free
# space for 5-20 s, then is removed. The server then runs with --write-through,
# so that every computed block goes to disk at once (otherwise the tiny
# model's KV rarely leaves RAM), and its fresh prompts are 80 random numbers
# long instead of 3 (several new blocks each); writes fail with ENOSPC: the server
# must keep answering (writes stop with one warning, inference carries on from
# RAM) and the kill -9 restarts, full or not, must still come up and lose
# nothing on disk. Prints a summary; exit 1 if anything grew or failed. Not
# part of the test suite (it takes minutes).
#
# usage: scripts/soak.sh [--minutes N] [--model FILE] [--clients N] [--kill-every S] [--keep DIR]
#                        [--disk-full-every S] [--disk-fs-mib N]
#   default: 5 minutes, a generated tiny model, 6 clients, no kills, no disk-full injection.
# Load mix per client loop: a completion sharing a long prefix with others (a
# cache hit), a fresh prompt (a miss), a streamed chat turn, /tokenize, a bad
# body (must be 400) and /metrics. A request without an answer (the
# connection failed) counts as failed, except across kill -9 restarts.
set -u
cd "$(dirname "$0")/.."
MINUTES=5 MODEL= CLIENTS=6 KILL_EVERY=0 KEEP= FULL_EVERY=0 FS_MIB=96
while [ $# -gt 0 ]; do
  case $1 in
    --minutes) MINUTES=$2; shift 2 ;;
    --model) MODEL=$2; shift 2 ;;
    --clients) CLIENTS=$2; shift 2 ;;
    --kill-every) KILL_EVERY=$2; shift 2 ;;
    --keep) KEEP=$2; shift 2 ;;
    --disk-full-every) FULL_EVERY=$2; shift 2 ;;
    --disk-fs-mib) FS_MIB=$2; shift 2 ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "soak: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
BIN=${KVT_BIN:-build/kvtier}
[ -x "$BIN" ] || { echo "soak: build first (scripts/build.sh) or set KVT_BIN" >&2; exit 2; }
command -v curl >/dev/null || { echo "soak: needs curl" >&2; exit 2; }
TMP=${KEEP:-$(mktemp -d)}
mkdir -p "$TMP"
SRV= CLIENT_PIDS=()
stop_clients() { for p in "${CLIENT_PIDS[@]}"; do kill "$p" 2>/dev/null; done; for p in "${CLIENT_PIDS[@]}"; do wait "$p" 2>/dev/null; done; CLIENT_PIDS=(); }
KV=$TMP/kv KVFS= MOUNTED= KV_SIZE=256M SERVE_EXTRA=() FRESH_WORDS=3
cleanup() {
  [ -n "$SRV" ] && kill -9 "$SRV" 2>/dev/null; stop_clients
  [ -n "$KVFS" ] && rm -f "$KVFS/filler"
  [ -n "$MOUNTED" ] && { umount "$MOUNTED" 2>/dev/null || umount -l "$MOUNTED"; }
  [ -z "$KEEP" ] && rm -rf "$TMP"
}
trap cleanup EXIT
# --disk-full-every: a small filesystem for the cache directory, to fill and free
if [ "$FULL_EVERY" -gt 0 ]; then
  KVFS=$TMP/kvfs
  mkdir -p "$KVFS"
  if [ "$(id -u)" = 0 ] && command -v mkfs.ext4 >/dev/null && truncate -s "${FS_MIB}M" "$TMP/kvfs.img" &&
     mkfs.ext4 -q -F -m 0 "$TMP/kvfs.img" && mount -o loop "$TMP/kvfs.img" "$KVFS" 2>/dev/null; then
    MOUNTED=$KVFS FS_KIND="ext4 image of $FS_MIB MiB (loop)"
  elif [ "$(id -u)" = 0 ] && mount -t tmpfs -o "size=${FS_MIB}m,mode=0700" tmpfs "$KVFS"; then
    MOUNTED=$KVFS FS_KIND="tmpfs of $FS_MIB MiB"
  else
    AVAIL=$(df -B1 --output=avail "$KVFS" | tail -n 1)
    if [ "$AVAIL" -gt $((4 << 30)) ]; then
      echo "soak: --disk-full-every needs root (for a small filesystem of its own), or --keep DIR on a filesystem with at most 4 GiB free: $KVFS has $((AVAIL >> 20)) MiB free, too much to fill" >&2
      exit 2
    fi
    FS_KIND="the filesystem of $KVFS ($((AVAIL >> 20)) MiB free)"
    FS_MIB=$((AVAIL >> 20))
  fi
  chmod 700 "$KVFS"
  KV=$KVFS/kv KV_SIZE=$((FS_MIB / 2))M SERVE_EXTRA=(--write-through) FRESH_WORDS=80
fi
FILLS=0 FILLED=0 NEXT_FILL=0 FREE_AT=0
fill_disk() { # takes every free byte of the cache directory's filesystem
  local avail; avail=$(df -B1 --output=avail "$KVFS" | tail -n 1)
  [ "$avail" -gt 0 ] && { fallocate -l "$avail" "$KVFS/filler" 2>/dev/null ||
    head -c "$avail" /dev/zero >"$KVFS/filler" 2>/dev/null; }
  FILLED=1 FILLS=$((FILLS + 1))
}
free_disk() { rm -f "$KVFS/filler"; FILLED=0; }
next_fill() { NEXT_FILL=$(( $(date +%s) + FULL_EVERY / 2 + RANDOM % (FULL_EVERY + 1) )); }
# records on disk that a restart must find: distinct keys of valid records, and the torn ones
disk_records() { "$BIN" cache ls --kv-disk "$KV" 2>/dev/null | grep -o 'hash=[0-9a-f]*' | sort -u | wc -l; }
disk_corrupt() { "$BIN" cache ls --kv-disk "$KV" 2>/dev/null | grep -c ' CORRUPT$'; }
if [ -z "$MODEL" ]; then
  MODEL=$TMP/m.gguf
  "$BIN" mkmodel -o "$MODEL" --dim 128 --layers 4 --heads 4 --kv-heads 2 --ff 256 --vocab 2000 >/dev/null 2>&1 ||
    { echo "soak: mkmodel failed" >&2; exit 1; }
fi

start() {
  "$BIN" serve -m "$MODEL" --host 127.0.0.1 --port 0 -t 2 --parallel 4 --kv-ram 16M --kv-disk "$KV" \
    --kv-disk-size "$KV_SIZE" "${SERVE_EXTRA[@]}" >>"$TMP/server.log" 2>&1 &
  SRV=$!
  for _ in $(seq 300); do
    PORT=$(grep -ao 'listening on http://127.0.0.1:[0-9]*' "$TMP/server.log" | tail -n 1 | grep -o '[0-9]*$')
    if [ -n "$PORT" ] && curl -s -m 2 -o /dev/null "http://127.0.0.1:$PORT/health"; then
      echo "$PORT" >"$TMP/port"; return 0
    fi
    sleep 0.1
  done
  echo "soak: the server did not start" >&2; tail -n 20 "$TMP/server.log" >&2; return 1
}
url() { echo "http://127.0.0.1:$(cat "$TMP/port")"; }
PREFIX="You are the support assistant of a company that sells tiered storage. Answer briefly and politely, cite the manual section, and never invent a part number."
probe() {
  curl -s -m 60 -H 'Content-Type: application/json' \
    -d "{\"prompt\": \"$PREFIX Probe question.\", \"max_tokens\": 12, \"temperature\": 0}" "$(url)/v1/completions" |
    grep -o '"text":"[^"]*"'
}
# one client: a loop of the mix, each outcome one word on its own line
client() {
  local n=0
  while :; do
    n=$((n + 1))
    local u; u=$(url)
    local r=$((RANDOM % 7))
    local code
    case $r in
      0|1) code=$(curl -s -m 120 -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' \
             -d "{\"prompt\": \"$PREFIX Question $((RANDOM % 20)).\", \"max_tokens\": 8}" "$u/v1/completions") ;;
      2) local fresh=fresh
         for _ in $(seq "$FRESH_WORDS"); do fresh="$fresh $RANDOM"; done
         code=$(curl -s -m 120 -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' \
             -d "{\"prompt\": \"$fresh text\", \"max_tokens\": 8}" "$u/v1/completions") ;;
      3) code=$(curl -s -m 120 -N -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' \
             -d '{"messages":[{"role":"user","content":"hello there"}],"max_tokens":8,"stream":true}' "$u/v1/chat/completions") ;;
      4) code=$(curl -s -m 30 -o /dev/null -w '%{http_code}' -d '{"content":"tokenize me please"}' "$u/tokenize") ;;
      5) code=$(curl -s -m 30 -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' -d '{"prompt": [1, 2,' "$u/v1/completions")
         case $code in 400) code=200 ;; 000) ;; *) code="bad400:$code" ;; esac ;;
      6) code=$(curl -s -m 30 -o /dev/null -w '%{http_code}' "$u/metrics") ;;
    esac
    echo "$code"
  done
}
sample() { # elapsed rss_kib fds threads
  local pid=$SRV
  local rss fds thr
  rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null)
  thr=$(awk '/^Threads/ {print $2}' "/proc/$pid/status" 2>/dev/null)
  fds=$(ls "/proc/$pid/fd" 2>/dev/null | wc -l)
  echo "$1 ${rss:-0} $fds ${thr:-0}" >>"$TMP/samples"
}

start || exit 1
REF=$(probe)
[ -n "$REF" ] || { echo "soak: the probe got no answer" >&2; exit 1; }
for i in $(seq "$CLIENTS"); do client >"$TMP/client.$i" 2>/dev/null & CLIENT_PIDS+=($!); done
END=$(( $(date +%s) + MINUTES * 60 ))
T0=$(date +%s) LAST_KILL=$(date +%s) KILLS=0 PROBE_BAD=0 RESTART_BAD=0
ON_DISK=0 FOUND=0 LOST=0 TORN=0 FULL_KILLS=0 BUDGET_LET_GO=0
[ "$FULL_EVERY" -gt 0 ] && next_fill
: >"$TMP/samples"
while [ "$(date +%s)" -lt "$END" ]; do
  sleep 5
  now=$(date +%s)
  if [ "$FULL_EVERY" -gt 0 ]; then
    if [ "$FILLED" = 0 ] && [ "$now" -ge "$NEXT_FILL" ]; then fill_disk; FREE_AT=$((now + 5 + RANDOM % 16))
    elif [ "$FILLED" = 1 ] && [ "$now" -ge "$FREE_AT" ]; then free_disk; next_fill; fi
  fi
  if [ "$KILL_EVERY" -gt 0 ] && [ $((now - LAST_KILL)) -ge "$KILL_EVERY" ]; then
    kill -9 "$SRV"; wait "$SRV" 2>/dev/null
    KILLS=$((KILLS + 1)); LAST_KILL=$now
    [ "$FILLED" = 1 ] && FULL_KILLS=$((FULL_KILLS + 1))
    # what the killed process left on disk; the restart's open must index all of it
    n_disk=$(disk_records); TORN=$((TORN + $(disk_corrupt)))
    log_lines=$(wc -l <"$TMP/server.log")
    start || { RESTART_BAD=$((RESTART_BAD + 1)); break; }
    # the open's line: N records in M segments (...) ... K records in S oldest segments let go to fit the budget
    open_line=$(tail -n +"$((log_lines + 1))" "$TMP/server.log" | grep -a ': [0-9]* records in [0-9]* segments' | tail -n 1)
    n_open=$(echo "$open_line" | grep -o ': [0-9]* records in' | grep -o '[0-9]*')
    n_budget=$(echo "$open_line" | grep -o '[0-9]* records in [0-9]* oldest segments let go' | grep -o '^[0-9]*')
    n_open=${n_open:-0} n_budget=${n_budget:-0}
    ON_DISK=$((ON_DISK + n_disk)) FOUND=$((FOUND + n_open)) BUDGET_LET_GO=$((BUDGET_LET_GO + n_budget))
    [ $((n_open + n_budget)) -lt "$n_disk" ] && LOST=$((LOST + n_disk - n_open - n_budget))
    : >"$TMP/samples" # memory and fds start over with the new process
  fi
  sample $((now - T0))
  [ "$(probe)" = "$REF" ] || PROBE_BAD=$((PROBE_BAD + 1))
done
stop_clients
curl -s -m 10 "$(url)/metrics" >"$TMP/metrics.txt"
kill -TERM "$SRV"; wait "$SRV"; STOP_RC=$?; SRV=

cat "$TMP"/client.* >"$TMP/outcomes"
TOTAL=$(wc -l <"$TMP/outcomes")
OK=$(grep -c '^2[0-9][0-9]$' "$TMP/outcomes")
BUSY=$(grep -c '^503$' "$TMP/outcomes")
NOCONN=$(grep -c '^000$' "$TMP/outcomes") # no answer: the connection failed (expected across kill -9 restarts)
FAILED=$(( TOTAL - OK - BUSY - NOCONN ))
[ "$KILLS" -eq 0 ] && FAILED=$(( FAILED + NOCONN ))
# flat: the last samples against those after warm-up (the first quarter of the samples)
read -r RSS0 FD0 RSS1 FD1 RSSMAX FDMAX < <(awk '{r[NR]=$2; f[NR]=$3} END {w=int(NR/4)+1; if (w>NR) w=NR;
  mr=0; mf=0; for (i=w;i<=NR;i++) {if (r[i]>mr) mr=r[i]; if (f[i]>mf) mf=f[i]}
  print r[w]+0, f[w]+0, r[NR]+0, f[NR]+0, mr, mf}' "$TMP/samples")
RSS_FLAT=$(( RSS1 <= RSS0 * 12 / 10 + 16384 ))
FD_FLAT=$(( FD1 <= FD0 + 4 ))
echo "soak: $MINUTES min, $CLIENTS clients, $TOTAL requests: $OK ok, $BUSY 503 (queue full), $NOCONN without a connection, $FAILED failed"
echo "soak: kill -9 cycles $KILLS (restarts that failed: $RESTART_BAD); probe answers that differed: $PROBE_BAD"
[ "$KILLS" -gt 0 ] && echo "soak: records on disk after the kills $ON_DISK, found by the restarts $FOUND, let go by them to fit the budget $BUDGET_LET_GO, lost $LOST; torn records skipped $TORN"
if [ "$FULL_EVERY" -gt 0 ]; then
  echo "soak: disk full injected $FILLS times on $FS_KIND ($FULL_KILLS kills while full); 'writes disabled' warnings: $(grep -c 'writes disabled' "$TMP/server.log")"
fi
[ "$KILLS" -gt 0 ] && echo "soak: memory and fds below are the last process's, since its restart"
echo "soak: RSS after warm-up $((RSS0 / 1024)) MiB, at the end $((RSS1 / 1024)) MiB, max $((RSSMAX / 1024)) MiB: $([ $RSS_FLAT = 1 ] && echo flat || echo GREW)"
echo "soak: open fds after warm-up $FD0, at the end $FD1, max $FDMAX: $([ $FD_FLAT = 1 ] && echo flat || echo GREW)"
grep -E '^kvtier_cache_hit_ratio |^kvtier_disk_writes_dropped_total |^process_cpu_seconds_total ' "$TMP/metrics.txt" | sed 's/^/soak: /'
echo "soak: graceful stop exit status $STOP_RC; server log: $([ -n "$KEEP" ] && echo "$TMP/server.log" || echo "(removed; --keep DIR keeps it)")"
[ "$FAILED" -eq 0 ] && [ "$PROBE_BAD" -eq 0 ] && [ "$RESTART_BAD" -eq 0 ] && [ "$LOST" -eq 0 ] && [ $RSS_FLAT = 1 ] && [ $FD_FLAT = 1 ] && [ "$STOP_RC" -eq 0 ]
