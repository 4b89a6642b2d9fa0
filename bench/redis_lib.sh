# Sourced (from the repository root) by bench/remote.sh and bench/remote_agents.sh
# after setting BIN: the tests' harness (tests/testutil.sh: $TMP, kvt_start_server,
# kvt_start_redis, everything stopped at exit) and start_redis.
KVT_BIN=$BIN
. tests/testutil.sh
KVT_SERVE_WAIT_S=${KVT_SERVE_WAIT_S:-120} # a 250M-parameter model loads slower than the tests' tiny ones

# start_redis MAXMEMORY: redis-server (evicting LRU past MAXMEMORY); sets RPORT, a key file
# in $TMP/key and REMOTE (the T3 flags)
start_redis() {
  command -v redis-server >/dev/null || { echo "$0: needs redis-server" >&2; exit 1; }
  kvt_start_redis --maxmemory "$1" --maxmemory-policy allkeys-lru
  head -c 32 /dev/urandom >"$TMP/key" && chmod 600 "$TMP/key"
  REMOTE=(--kv-remote "redis://127.0.0.1:$RPORT" --kv-remote-key-file "$TMP/key")
}
