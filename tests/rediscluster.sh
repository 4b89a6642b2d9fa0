# shellcheck shell=bash disable=SC2034 # it sets variables for the test that sources it
# A Redis Cluster on loopback for the tests (and bench/), sourced after tests/testutil.sh:
# its nodes are servers of the harness (KVT_PID[rcN], KVT_LOG[rcN]), so they are killed at
# exit and a failed test prints their logs.

# kvt_start_redis_cluster PRIMARIES REPLICAS [redis-server ARGS...]: PRIMARIES x (1 + REPLICAS)
# cluster-enabled redis-servers on consecutive free ports, joined with `redis-cli --cluster
# create`; returns once every node says cluster_state:ok. Sets RC_PORTS (every node's port),
# RC_URL (redis-cluster://127.0.0.1:P,... of all of them) and RC_N.
# With RC_USER and RC_PASS set, the nodes run with ACLs: that user (every command and key) is
# the way in, the default user is off (or, with RC_DEFAULT_PASS set, needs that password), and
# replicas sync as RC_USER. RC_URL then carries RC_USER:RC_PASS@ (escaped). Talk to the nodes through
# RC_CLI (redis-cli with the credentials, or plain redis-cli without them).
kvt_start_redis_cluster() {
  local np=$1 nr=$2 try i p base up acl=()
  shift 2
  RC_N=$((np * (nr + 1)))
  RC_CLI=(redis-cli)
  if [ -n "${RC_USER:-}" ]; then
    RC_CLI=(redis-cli --user "$RC_USER" --pass "$RC_PASS" --no-auth-warning)
    acl=(--user "$RC_USER" on ">$RC_PASS" '~*' '&*' '+@all' --masteruser "$RC_USER" --masterauth "$RC_PASS")
    if [ -n "${RC_DEFAULT_PASS:-}" ]; then acl+=(--user default on ">$RC_DEFAULT_PASS" '~*' '&*' '+@all')
    else acl+=(--user default off); fi
  fi
  for try in $(seq 10); do
    base=$((20000 + RANDOM % 30000)) # the cluster bus is port + 10000
    RC_PORTS=()
    for i in $(seq 0 $((RC_N - 1))); do
      p=$((base + i))
      mkdir -p "$TMP/rc$i"
      redis-server --port "$p" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
        --cluster-enabled yes --cluster-config-file "$TMP/rc$i/nodes.conf" --dir "$TMP/rc$i" \
        --cluster-node-timeout 1000 "${acl[@]}" "$@" >"$TMP/rc$i.log" 2>&1 &
      KVT_PID["rc$i"]=$! KVT_LOG["rc$i"]=$TMP/rc$i.log
      RC_PORTS+=("$p")
    done
    up=1
    for i in $(seq 0 $((RC_N - 1))); do kvt_rc_up "$i" || { up=0; break; }; done
    [ "$up" = 1 ] && break
    kvt_stop_redis_cluster # a port was taken: another range
    rm -rf "$TMP"/rc*
  done
  [ "$up" = 1 ] || { echo "the cluster's redis-servers did not start" >&2; exit 1; }
  # shellcheck disable=SC2046 # one argument per node
  "${RC_CLI[@]}" --cluster create $(printf '127.0.0.1:%s ' "${RC_PORTS[@]}") --cluster-replicas "$nr" \
    --cluster-yes >"$TMP/rc-create.log" 2>&1 || { cat "$TMP/rc-create.log" >&2; exit 1; }
  wait_for kvt_cluster_ok || { echo "the cluster never became ok" >&2; exit 1; }
  RC_URL=redis-cluster://${RC_USER:+$RC_USER:$(kvt_uri_escape "$RC_PASS")@}$(printf '127.0.0.1:%s,' "${RC_PORTS[@]}")
  RC_URL=${RC_URL%,}
}

# kvt_uri_escape TEXT: TEXT with every character a URL reserves as %XX (for user:password@)
kvt_uri_escape() { jq -rn --arg s "$1" '$s | @uri'; }

# kvt_rc_up I: waits (10 s at most) until node I answers PING; 1 if it exits first (its port taken)
kvt_rc_up() {
  local _i
  for _i in $(seq 200); do
    kill -0 "${KVT_PID[rc$1]}" 2>/dev/null || return 1
    [ "$("${RC_CLI[@]}" -p "${RC_PORTS[$1]}" ping 2>/dev/null)" = PONG ] && return 0
    sleep 0.05
  done
  return 1
}

# kvt_cluster_ok: every running node says cluster_state:ok and sees the same epoch of slots, and
# (with every node running) each one's CLUSTER SHARDS has them all online: a replica is "loading"
# until its first sync, and kvtier reads only online ones
kvt_cluster_ok() {
  local i n=0
  for i in $(seq 0 $((RC_N - 1))); do
    [ -n "${KVT_PID[rc$i]:-}" ] || continue # killed
    n=$((n + 1))
    "${RC_CLI[@]}" -p "${RC_PORTS[$i]}" cluster info | grep -q '^cluster_state:ok' || return 1
  done
  [ "$n" = "$RC_N" ] || return 0
  for i in $(seq 0 $((RC_N - 1))); do
    [ "$("${RC_CLI[@]}" -p "${RC_PORTS[$i]}" cluster shards | grep -cx online)" = "$RC_N" ] || return 1
  done
}

# kvt_cluster_primaries: the ports of the running primaries, one a line
kvt_cluster_primaries() {
  local i
  for i in $(seq 0 $((RC_N - 1))); do
    [ -n "${KVT_PID[rc$i]:-}" ] || continue # killed
    "${RC_CLI[@]}" -p "${RC_PORTS[$i]}" role | head -1 | grep -q '^master$' && echo "${RC_PORTS[$i]}"
  done
}

# kvt_cluster_kill I: kill -9 node I (what a crash looks like)
kvt_cluster_kill() {
  kill -9 "${KVT_PID[rc$1]}" 2>/dev/null || true
  wait "${KVT_PID[rc$1]}" 2>/dev/null || true
  unset "KVT_PID[rc$1]"
}

kvt_stop_redis_cluster() {
  local i
  for i in $(seq 0 $((RC_N - 1))); do [ -z "${KVT_PID[rc$i]:-}" ] || kvt_cluster_kill "$i"; done
}
