#!/usr/bin/env bash
# kvtier route in front of three `kvtier serve` nodes that share one redis-server (T3), all on
# loopback, started here:
# - /v1/cache/lookup (GET and POST) answers block keys and cached tokens by tier, never text;
#   it needs an API key and each key sees its own namespace; /v1/cache/events needs the
#   metrics key and lists the keys a node stored;
# - a session's turns (X-Session-Id, or kvtier.session_id) land on one node and hit T0/T1;
# - a prompt that extends a cached one goes to the node holding it (by prefix);
# - a streamed answer passes through as SSE;
# - a node killed under traffic: its sessions move to the others, restore their prefix from
#   T3 and complete, and no request is lost; the router's /metrics count per node.
set -u
command -v redis-server >/dev/null || { echo "SKIP: redis-server is not installed (apt-get install redis-server)"; exit 77; }
command -v curl >/dev/null && command -v jq >/dev/null || { echo "SKIP: needs curl and jq"; exit 77; }
. "$(dirname "$0")/../testutil.sh"

kvt_t3_setup
# --restore always: a moved session reads its prefix from T3 even where recomputing this tiny
# model would be cheaper (that is what the checks are about); T3 reads get 10 s on a loaded machine
KVT_SERVE_ARGS=(-m "$TMP/m.gguf" --host 127.0.0.1 -t 1 --parallel 4 --api-key k1 --api-key k2 --metrics-key mk
  --kv-remote "redis://127.0.0.1:$RPORT" --kv-remote-key-file "$TMP/key" --kv-remote-timeout-ms 10000
  --write-through --restore always)
for n in A B C; do kvt_start_server $n; done
NODES="${KVT_URL[A]},${KVT_URL[B]},${KVT_URL[C]}"

# the router, on a free port; its log says where it listens
"$BIN" route --nodes "$NODES" --port 0 --node-key mk --health-ms 100 >"$TMP/route.log" 2>&1 &
RPID=$!
KVT_PID[route]=$RPID KVT_LOG[route]=$TMP/route.log
wait_for grep -q 'listening on http://' "$TMP/route.log"
R=$(grep -ao 'listening on http://[^ ]*' "$TMP/route.log" | head -n 1 | cut -d' ' -f3)
rmetric() { curl -s -m 10 "$R/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }
up_nodes() { curl -s -m 10 "$R/health" | jq -r .nodes_up; }
wait_for test "$(up_nodes)" = 3
check "the router sees 3 nodes up" is "$(up_nodes)" 3

LONG="a fixed and rather long system prompt for the fleet: you answer questions about the tiered cache, its pages in memory, its host memory tier, its disk tier and the shared remote tier, and you say which tier served"
# chat SESSION_PROMPT TURN: a chat body whose system prompt is the session's own (unique text: only
# the node that ran it, and T3, hold its blocks), and TURN user messages
chat() {
  local msgs="{\"role\":\"system\",\"content\":\"$1 $LONG\"}" t
  for t in $(seq "$2"); do
    [ "$t" -gt 1 ] && msgs="$msgs,{\"role\":\"assistant\",\"content\":\"answer $((t - 1))\"}"
    msgs="$msgs,{\"role\":\"user\",\"content\":\"question number $t about the tiers\"}"
  done
  echo "{\"messages\":[$msgs],\"max_tokens\":4,\"temperature\":0}"
}
# via OUT BODY [CURL_ARGS...]: POST BODY to the router's chat route, the body in OUT, headers in OUT.h
via() {
  local out=$1 body=$2; shift 2
  curl -s -m 120 -D "$out.h" -o "$out" -H 'Content-Type: application/json' -H 'Authorization: Bearer k1' "$@" \
    -d "$body" "$R/v1/chat/completions"
}
node_of() { tr -d '\r' <"$1.h" | awk -F': ' 'tolower($1) == "x-kvtier-node" { print $2 }'; }
route_of() { tr -d '\r' <"$1.h" | awk -F': ' 'tolower($1) == "x-kvtier-route" { print $2 }'; }
hot() { jq -r '.kvtier.cached_tokens_by_tier | .T0 + .T1' "$1"; }

# ---- /v1/cache/lookup and /v1/cache/events on a node ------------------------------------------
URL=${KVT_URL[A]}
LBODY=$(chat "lookup-probe" 1)
post /v1/cache/lookup "$LBODY"
check "lookup without an API key is 401" is "$CODE" 401
post /v1/cache/lookup "$LBODY" -H 'Authorization: Bearer k1'
check "lookup (POST) answers" is "$CODE" 200
cp "$TMP/body" "$TMP/l1.json"
check "lookup has the prompt's block keys" ge "$(jq '.block_keys | length' "$TMP/l1.json")" 2
check "a cold prompt has no cached tokens" is "$(jq -r .cached_tokens.total "$TMP/l1.json")" 0
check "lookup answers no text: only counts and hex keys" \
  is "$(jq -r '[paths(type == "string")] | map(.[0]) | unique | join(",")' "$TMP/l1.json")" "block_keys,object"
check "... and no word of the prompt" expect_rc 1 grep -q 'lookup-probe\|fleet\|system' "$TMP/l1.json"
post /v1/chat/completions "$LBODY" -H 'Authorization: Bearer k1'
CODE=$(curl -s -m 60 -o "$TMP/body" -w '%{http_code}' -X GET -H 'Authorization: Bearer k1' \
  -H 'Content-Type: application/json' -d "$LBODY" "$URL/v1/cache/lookup")
check "lookup (GET with a body) answers" is "$CODE" 200
check "after a run, the prompt's blocks are in T0 for its key" gt "$(jq -r .cached_tokens.T0 "$TMP/body")" 0
check "the keys are the same for the same key" is "$(jb -c .block_keys)" "$(jq -c .block_keys "$TMP/l1.json")"
post /v1/cache/lookup "$LBODY" -H 'Authorization: Bearer k2'
check "another API key sees none of it cached" is "$(jb .cached_tokens.total)" 0
check "... under other block keys" test "$(jb -c '.block_keys[0]')" != "$(jq -c '.block_keys[0]' "$TMP/l1.json")"
post /v1/cache/lookup '{"prompt":1}' -H 'Authorization: Bearer k1'
check "a bad prompt is a 400 naming the field" test "$CODE" = 400 -a "$(jb .error.param)" = prompt
CODE=$(curl -s -m 10 -o "$TMP/body" -w '%{http_code}' -H 'Authorization: Bearer k1' "$URL/v1/cache/events")
check "events need the metrics key, not an API key" is "$CODE" 401
CODE=$(curl -s -m 10 -o "$TMP/body" -w '%{http_code}' -H 'Authorization: Bearer mk' "$URL/v1/cache/events?since=0")
check "events answer with the metrics key" is "$CODE" 200
k0=$(jq -r '.block_keys[0]' "$TMP/l1.json")
check "events list the stored blocks' keys" test "$(jb -c "[.events[] | select(. == \"+$k0\")] | length")" = 1
CODE=$(curl -s -m 10 -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer mk' "$URL/v1/cache/events?since=x")
check "a bad 'since' is a 400" is "$CODE" 400

# ---- sessions stick, and hit T0/T1 on their node ------------------------------------------------
for t in 1 2 3; do via "$TMP/s$t" "$(chat "session one" "$t")" -H 'X-Session-Id: one'; done
check "a session's turns land on one node" test "$(node_of "$TMP/s1")" = "$(node_of "$TMP/s2")" -a \
  "$(node_of "$TMP/s2")" = "$(node_of "$TMP/s3")"
check "turn 2 routed by its session" is "$(route_of "$TMP/s2")" session
check "turn 2 hits T0/T1" gt "$(hot "$TMP/s2")" 0
check "turn 3 hits T0/T1" gt "$(hot "$TMP/s3")" 0
for t in 1 2; do
  b=$(chat "session two" "$t" | jq -c '. + {kvtier: {session_id: "two"}}')
  via "$TMP/b$t" "$b"
done
check "kvtier.session_id sticks too" is "$(node_of "$TMP/b2")" "$(node_of "$TMP/b1")"
check "... with T0/T1 hits" gt "$(hot "$TMP/b2")" 0

# ---- no session: the longest cached prefix wins ---------------------------------------------------
via "$TMP/p1" "$(chat "prefix run" 1)"
via "$TMP/p2" "$(chat "prefix run" 2)"
check "a prompt extending a cached one goes where it is cached" is "$(node_of "$TMP/p2")" "$(node_of "$TMP/p1")"
check "... routed by prefix" is "$(route_of "$TMP/p2")" prefix
check "... and hits T0/T1 there" gt "$(hot "$TMP/p2")" 0

# ---- streaming passes through ---------------------------------------------------------------------
via "$TMP/st" "$(chat "stream" 1 | jq -c '. + {stream: true}')"
check "a stream comes back as SSE" grep -qi '^content-type: text/event-stream' "$TMP/st.h"
check "... with its chunks" ge "$(grep -c '^data: {' "$TMP/st")" 2
check "... and its end" grep -q '^data: \[DONE\]' "$TMP/st"

# ---- a node killed under traffic ------------------------------------------------------------------
for i in 1 2 3 4 5 6; do via "$TMP/k$i.1" "$(chat "moving session $i" 1)" -H "X-Session-Id: mv$i"; done
victim=$(for i in 1 2 3 4 5 6; do node_of "$TMP/k$i.1"; done | sort | uniq -c | sort -rn | head -n 1 | awk '{print $2}')
vname=$(for n in A B C; do [ "${KVT_URL[$n]}" = "$victim" ] && echo $n; done)
# the victim's write-through queue is in Redis once a flush returns
curl -s -m 60 -X POST -H 'Authorization: Bearer k1' "$victim/v1/cache/flush" >/dev/null
moved=0
for i in 1 2 3 4 5 6; do [ "$(node_of "$TMP/k$i.1")" = "$victim" ] && moved=$((moved + 1)); done
check "the victim ran sessions ($moved of 6)" gt "$moved" 0
# turn 2 of every session at once, the victim killed as they go out
pids=()
for i in 1 2 3 4 5 6; do
  via "$TMP/k$i.2" "$(chat "moving session $i" 2)" -H "X-Session-Id: mv$i" &
  pids+=($!)
done
kvt_stop_server "$vname" 9
wait "${pids[@]}" 2>/dev/null
ok=0 t3=0
for i in 1 2 3 4 5 6; do
  [ "$(jq -r '.choices[0].finish_reason' "$TMP/k$i.2" 2>/dev/null)" = length ] && ok=$((ok + 1))
  if [ "$(node_of "$TMP/k$i.1")" = "$victim" ]; then
    check "session $i moved off the dead node" test "$(node_of "$TMP/k$i.2")" != "$victim"
    [ "$(jq -r '.kvtier.cached_tokens_by_tier.T3' "$TMP/k$i.2")" -gt 0 ] && t3=$((t3 + 1))
  fi
done
check "no request lost: all 6 second turns completed" is "$ok" 6
check "the moved sessions restored from T3 ($t3 of $moved)" is "$t3" "$moved"
wait_for test "$(up_nodes)" = 2
check "the router counts the dead node down" is "$(rmetric "kvtier_route_node_up{node=\"$victim\"}")" 0
for i in 1 2 3 4 5 6; do via "$TMP/k$i.3" "$(chat "moving session $i" 3)" -H "X-Session-Id: mv$i"; done
ok=0
for i in 1 2 3 4 5 6; do
  [ "$(node_of "$TMP/k$i.3")" = "$(node_of "$TMP/k$i.2")" ] && [ "$(hot "$TMP/k$i.3")" -gt 0 ] && ok=$((ok + 1))
done
check "turn 3 stays on the new node, hitting T0/T1 (6 sessions)" is "$ok" 6
check "router metrics: requests per node" gt "$(rmetric "kvtier_route_requests_total{node=\"${KVT_URL[A]}\"}")" 0
check "router metrics: no request lost" is "$(rmetric kvtier_route_lost_total)" 0
check "router metrics: a cached share per node" grep -q '^kvtier_route_cached_fraction{node=' <(curl -s "$R/metrics")
check "route --help names every flag" test "$("$BIN" route --help | grep -cE -- '--(nodes|host|port|node-key|policy|balance|health-ms|timeout-s|max-body)')" -ge 9
expect_rc 2 "$BIN" route --nodes ftp://x:1
check "a bad node URL is refused naming --nodes" grep -q -- '--nodes' "$TMP/out"
kvt_test_done test_route
