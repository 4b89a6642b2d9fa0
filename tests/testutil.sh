# shellcheck shell=bash disable=SC2034 # it sets variables for the test that sources it
# Shared harness of the shell tests (the shell twin of testutil.c): source it
# after the test's skip checks. It makes $TMP (removed at exit), counts checks
# (kvt_test_done ends the test: a failed check or no check at all fails it, a
# part skipped with kvt_test_skip_part makes it a skip once the rest passed),
# and starts and stops `kvtier serve` and redis-server for the server tests;
# whatever it started is killed at exit, and a failed test prints the tail of
# every server log. bench/ sources it too, for the same servers.
BIN=${KVT_BIN:?KVT_BIN must point to the kvtier binary}
TMP=$(mktemp -d)
# python3 found through a version manager's shim (pyenv's is a shell script that runs pyenv)
# costs ~0.6 s of CPU per start on the CI machine, and the tests start it often (raw sockets,
# JSON checks): the test's python3, and that of the bash -c checks it runs, is the interpreter
# that shim picks, run directly
if KVT_PYTHON3=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null) && [ -x "$KVT_PYTHON3" ]; then
  python3() { "$KVT_PYTHON3" "$@"; }
  export KVT_PYTHON3
  export -f python3
fi
pass=0 fail=0
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; } # bad DESCRIPTION: a failed check
check() { # check DESCRIPTION COMMAND...
  local d=$1; shift
  if "$@"; then pass=$((pass + 1)); else bad "$d"; fi
}
skipped_parts=''
kvt_test_skip_part() { # kvt_test_skip_part WHY: a part of the test could not run (WHY says what and why)
  echo "note: skipped: $1"
  skipped_parts=${skipped_parts:+$skipped_parts; }$1
}
kvt_test_done() { # kvt_test_done NAME: 1 on a failed check or none at all, 77 (skip) if a part was skipped
  echo "$1: $pass passed, $fail failed"
  [ "$fail" -eq 0 ] && [ "$pass" -gt 0 ] || return 1
  [ -z "$skipped_parts" ] || { echo "SKIP: $1: $skipped_parts"; return 77; }
}
# kvt_tsan: whether $BIN is a ThreadSanitizer build (scripts/test.sh sets TSAN_OPTIONS for it), where a
# token takes ~10x as long: a test that needs a request to last a while can ask for fewer tokens
# kvt_spm_model OUT: a tiny mkmodel model at OUT on ../shared's SentencePiece vocabulary (where ChatML
# markup is plain text and generated ids often differ from how their text re-tokenizes), or on
# mkmodel's byte vocabulary, as a skipped part, when that file is missing. Exits 1 if mkmodel fails.
kvt_spm_model() {
  local spm=${KVT_SHARED:-../shared}/vocab/ggml-vocab-llama-spm.gguf vocab=()
  if [ -f "$spm" ]; then
    vocab=(--vocab-from "$spm")
  else
    kvt_test_skip_part "$spm is missing: the checks ran on mkmodel's byte vocabulary"
  fi
  "$BIN" mkmodel -o "$1" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 "${vocab[@]}" >/dev/null 2>&1 ||
    { echo "mkmodel failed"; exit 1; }
}
kvt_tsan() { [ -n "${TSAN_OPTIONS:-}" ] || grep -qa __tsan_init "$BIN"; }
# comparisons for check that say what they got
is() { [ "$1" = "$2" ] || { echo "  got '$1', want '$2'" >&2; return 1; }; }
gt() { [ "$1" -gt "$2" ] 2>/dev/null || { echo "  got '$1', want > $2" >&2; return 1; }; }
ge() { [ "$1" -ge "$2" ] 2>/dev/null || { echo "  got '$1', want >= $2" >&2; return 1; }; }
lt() { [ "$1" -lt "$2" ] 2>/dev/null || { echo "  got '$1', want < $2" >&2; return 1; }; }
expect_rc() { # expect_rc RC COMMAND...: COMMAND exits RC (its stdout and stderr in $TMP/out)
  local want=$1 rc=0; shift
  "$@" >"$TMP/out" 2>&1 || rc=$?
  [ "$rc" -eq "$want" ] || { echo "  '$*' exited $rc, expected $want:" >&2; head -5 "$TMP/out" >&2; return 1; }
}

# ---- kvtier serve ------------------------------------------------------------------------------
# KVT_SERVE_ARGS: the serve flags every kvt_start_server of a test passes first (the
# model, -t 1, ...); a flag given again in the call's ARGS wins, as on any command line.
KVT_SERVE_ARGS=()
# per server NAME: its pid (while it runs), base URL, port and the log it writes
declare -A KVT_PID=() KVT_URL=() KVT_PORT=() KVT_LOG=()
KVT_REDIS_PID=

# kvt_start_server NAME ARGS...: `$BIN serve --port 0 ${KVT_SERVE_ARGS[@]} ARGS...` in the
# background, its stdout and stderr in $TMP/NAME.log ($KVT_SERVE_LOG_DIR/NAME.log when that is
# set; a --log-file in ARGS gets the log lines instead). Waits until its "listening on" line,
# which the server logs once the port accepts connections, for at most $KVT_SERVE_WAIT_S
# seconds (default 60); a server that exits first or never says it fails the test with its
# log. Sets KVT_PID[NAME], KVT_URL[NAME], KVT_PORT[NAME] and KVT_LOG[NAME], and SRV_NAME,
# SRV_PID, URL and PORT for the server started last. Assignments before the call
# (VAR=x kvt_start_server ...) are in the server's environment.
kvt_start_server() {
  local name=$1 out=${KVT_SERVE_LOG_DIR:-$TMP}/$1.log log a prev='' skip=0
  shift
  [ -z "${KVT_PID[$name]:-}" ] || { echo "kvt_start_server: server $name is running already" >&2; exit 1; }
  log=$out
  for a in "$@"; do
    case $prev in --log-file) log=$a ;; esac
    case $a in --log-file=*) log=${a#--log-file=} ;; esac
    prev=$a
  done
  # a --log-file that the last run appended to: only the lines of this run count
  if [ "$log" != "$out" ] && [ -f "$log" ]; then skip=$(wc -l <"$log"); fi
  # emptied here, not only by the background redirect: a restart under the same NAME would
  # otherwise race it and could read the last run's "listening on" line (its dead port)
  : >"$out"
  "$BIN" serve --port 0 "${KVT_SERVE_ARGS[@]}" "$@" >"$out" 2>&1 &
  local pid=$! end=$((SECONDS + ${KVT_SERVE_WAIT_S:-60})) url=
  KVT_PID[$name]=$pid KVT_LOG[$name]=$log
  while :; do
    url=$(tail -n +"$((skip + 1))" "$log" 2>/dev/null | grep -ao 'listening on http://[^ "]*' | head -n 1 || true)
    url=${url#listening on }
    [ -n "$url" ] && break
    if ! kill -0 "$pid" 2>/dev/null || [ "$SECONDS" -ge "$end" ]; then
      echo "server $name did not start:" >&2
      cat "$out" >&2
      [ "$log" = "$out" ] || cat "$log" >&2
      exit 1
    fi
    sleep 0.1
  done
  KVT_URL[$name]=$url KVT_PORT[$name]=${url##*:}
  SRV_NAME=$name SRV_PID=$pid URL=$url PORT=${url##*:}
}

# kvt_stop_server NAME [SIGNAL]: sends SIGNAL (default TERM) and waits for the server;
# returns its exit status (a graceful stop is 0, kill -9 is 137)
kvt_stop_server() {
  kill -"${2:-TERM}" "${KVT_PID[$1]:?kvt_stop_server: no server $1 running}" 2>/dev/null || true
  kvt_wait_server "$1"
}

# kvt_wait_server NAME: waits for a server the test has signalled itself; its exit status
kvt_wait_server() {
  local pid=${KVT_PID[$1]:?kvt_wait_server: no server $1 running} rc=0
  wait "$pid" 2>/dev/null || rc=$?
  unset "KVT_PID[$1]"
  return "$rc"
}

# post PATH JSON [curl args...]: POSTs JSON to $URL$PATH; the body in $TMP/body, the status in $CODE
post() {
  local path=$1 json=$2; shift 2
  CODE=$(curl -s -m 120 -o "$TMP/body" -w '%{http_code}' -H 'Content-Type: application/json' "$@" -d "$json" "$URL$path")
}
# jb [-c] FILTER: jq over $TMP/body, strings raw (-c: compact JSON)
jb() { if [ "$1" = -c ]; then jq -c "$2" "$TMP/body"; else jq -r "$1" "$TMP/body"; fi; }
# health JQ: a field of $URL/health
health() { curl -s -m 10 "$URL/health" | jq -r "$1"; }
# wait_health JQ VALUE: waits (30 s at most) until that field of $URL/health has the value
wait_health() {
  local _i
  for _i in $(seq 600); do [ "$(health "$1")" = "$2" ] && return 0; sleep 0.05; done
  echo "  /health $1 never became $2" >&2; return 1
}
# wait_for COMMAND...: runs COMMAND every 50 ms until it succeeds (30 s at most); for a test
# that waits for a condition rather than sleeping a guessed time
wait_for() {
  local _i
  for _i in $(seq 600); do "$@" >/dev/null 2>&1 && return 0; sleep 0.05; done
  echo "  still failing after 30 s: $*" >&2; return 1
}

# ---- redis-server (the T3 tier) ----------------------------------------------------------------
# kvt_start_redis [ARGS...]: redis-server on loopback, port $RPORT when set (a restart), else
# a free one: redis 7 cannot be told --port 0, so random ports are tried until a server stays
# up on one. Sets RPORT and KVT_REDIS_PID; its log is $TMP/redis.log.
kvt_start_redis() {
  local _try _i
  for _try in $(seq 20); do
    RPORT=${RPORT:-$((20000 + RANDOM % 30000))}
    redis-server --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no --daemonize no "$@" \
      >"$TMP/redis.log" 2>&1 &
    KVT_REDIS_PID=$!
    for _i in $(seq 50); do
      redis-cli -p "$RPORT" ping >/dev/null 2>&1 && return 0
      kill -0 "$KVT_REDIS_PID" 2>/dev/null || break
      sleep 0.1
    done
    kvt_stop_redis; unset RPORT
  done
  echo "redis-server did not start:" >&2; cat "$TMP/redis.log" >&2; exit 1
}
# kvt_t3_setup: what the T3 node tests share: a tiny model at $TMP/m.gguf, a private block-MAC
# key at $TMP/key (mode 600) and a started redis-server (kvt_start_redis)
kvt_t3_setup() {
  "$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 --vocab 800 2>/dev/null
  head -c 32 /dev/urandom >"$TMP/key" && chmod 600 "$TMP/key"
  kvt_start_redis
}
# kvt_stop_redis: kills redis-server (-9: what a crash looks like to the servers)
kvt_stop_redis() {
  [ -n "$KVT_REDIS_PID" ] || return 0
  kill -9 "$KVT_REDIS_PID" 2>/dev/null || true
  wait "$KVT_REDIS_PID" 2>/dev/null || true
  KVT_REDIS_PID=
}

# at exit: kill what still runs, show the server logs of a failed test, remove $TMP
kvt_cleanup() {
  local p l
  for p in "${KVT_PID[@]}" $KVT_REDIS_PID; do kill -9 "$p" 2>/dev/null || true; done
  for p in "${KVT_PID[@]}" $KVT_REDIS_PID; do wait "$p" 2>/dev/null || true; done # quietly, no "Killed"
  if [ "$fail" -gt 0 ]; then
    for l in "${KVT_LOG[@]}"; do [ -f "$l" ] && { echo "--- $l" >&2; tail -n 30 "$l" >&2; }; done
  fi
  rm -rf "$TMP"
}
trap kvt_cleanup EXIT
