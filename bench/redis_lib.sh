# Sourced by bench/remote.sh and bench/remote_agents.sh: a redis-server and
# kvtier servers on free loopback ports, all killed on exit. The caller sets
# BIN and MODEL; SERVE_ARGS holds the serve flags every node gets.
TMP=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$TMP"; }
trap cleanup EXIT

# start_redis MAXMEMORY: sets RPORT, a key file in $TMP/key and REMOTE (the T3 flags)
start_redis() {
  command -v redis-server >/dev/null || { echo "$0: needs redis-server" >&2; exit 1; }
  for _ in $(seq 20); do
    RPORT=$((20000 + RANDOM % 30000))
    redis-server --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
      --maxmemory "$1" --maxmemory-policy allkeys-lru >"$TMP/redis.log" 2>&1 &
    PIDS+=("$!")
    for _ in $(seq 50); do
      if redis-cli -p "$RPORT" ping >/dev/null 2>&1; then
        head -c 32 /dev/urandom >"$TMP/key" && chmod 600 "$TMP/key"
        REMOTE=(--kv-remote "redis://127.0.0.1:$RPORT" --kv-remote-key-file "$TMP/key")
        return 0
      fi
      sleep 0.1
    done
  done
  echo "$0: redis-server did not start" >&2; exit 1
}

# start NAME ARGS...: a kvtier server on a free port; sets URL and SRV
start() {
  local name=$1; shift
  "$BIN" serve -m "$MODEL" --host 127.0.0.1 --port 0 "${SERVE_ARGS[@]}" "$@" >"$TMP/$name.log" 2>&1 &
  SRV=$!
  PIDS+=("$SRV")
  for _ in $(seq 600); do
    local port; port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$TMP/$name.log" | grep -o '[0-9]*$' || true)
    if [ -n "$port" ]; then URL="http://127.0.0.1:$port"; return 0; fi
    sleep 0.1
  done
  cat "$TMP/$name.log" >&2; exit 1
}
