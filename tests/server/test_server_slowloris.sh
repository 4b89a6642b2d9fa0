#!/usr/bin/env bash
# kvtier serve against slow clients from several addresses, clients behind a
# trusted proxy, and header lines that let a request be smuggled: the reserve
# of connections for new addresses, the header deadline, X-Forwarded-For from
# --trusted-proxy only, and 400 + close for folded lines and NULs. Loopback has
# all of 127.0.0.0/8, so the clients bind 127.0.0.2 and up to be other addresses.
# Needs curl and jq, and python3 for raw sockets (tests/http_raw.py).
set -u
HERE=${KVT_SRC:?KVT_SRC must point to the source tree}/tests
command -v curl >/dev/null && command -v jq >/dev/null || { echo "SKIP: needs curl and jq"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: needs python3 for raw-socket requests"; exit 77; }
RAW() { python3 "$HERE/http_raw.py" "$@"; }
. "$(dirname "$0")/../testutil.sh"
python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.2", 0))' 2>/dev/null ||
  { echo "SKIP: cannot bind 127.0.0.2 (loopback is not 127.0.0.0/8 here)"; exit 77; }

"$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 >/dev/null 2>&1 || { echo "mkmodel failed"; exit 1; }
KVT_SERVE_ARGS=(-m "$TMP/m.gguf" --host 127.0.0.1 -t 1 --parallel 1)

raw_status() { head -n 1 "$TMP/raw" | tr -d '\r' | cut -d' ' -f2; }
# raw_request BYTES [http_raw.py send args...]: sends BYTES (backslash escapes expanded), answer in $TMP/raw,
# RAW_RC 0 when the server closed the connection (3: it left it open)
raw_request() {
  local bytes=$1; shift
  printf '%b' "$bytes" | RAW send "$PORT" "$@" >"$TMP/raw"
  RAW_RC=$?
}
# answers [STATUS]: the responses in $TMP/raw (with that status); one may follow another's body on its line
answers() { grep -ao "HTTP/1\.[01] ${1:-[0-9]}" "$TMP/raw" | wc -l; }
# wait_line FILE PATTERN: polls (60 s at most) until FILE has a line matching PATTERN
wait_line() {
  local _i
  for _i in $(seq 600); do grep -q -- "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "  $1 never got a line matching '$2'" >&2; return 1
}

# ---- flags -------------------------------------------------------------------------------------
"$BIN" serve --help >"$TMP/help" 2>&1
for flag in --header-timeout --max-conns --conn-reserve --trusted-proxy X-Forwarded-For; do
  check "serve --help explains $flag" grep -q -- "$flag" "$TMP/help"
done
expect_rc 2 "$BIN" serve --max-conns 16 --conn-reserve 16
check "--conn-reserve not below --max-conns: usage error naming both" grep -q -- '--conn-reserve (16) must be less than --max-conns (16)' "$TMP/out"
expect_rc 2 "$BIN" serve --trusted-proxy 127.0.0.1,proxy.example
check "--trusted-proxy with a name: usage error naming it" grep -q -- "--trusted-proxy needs IP addresses.*'proxy.example'" "$TMP/out"

# ---- slow connections from 10 addresses fill the server, but not its reserve --------------------
# 40 connections at most, 8 of them kept for addresses with none open: the wave opens 4 from each of
# 127.0.0.2..11 in turn; the first 32 get in, the next 8 are closed at once though no address is at its
# quota of 8. Each sends a header byte a second, so MHD's idle timeout never fires; the header deadline
# (60 s here, so that the checks never race it) is checked on the next server.
kvt_start_server held --max-conns 40 --conn-reserve 8 --max-conns-per-ip 8 --header-timeout 60 \
  --request-timeout 60 --drain-timeout 0
WAVE_SRC=$(seq -s, -f '127.0.0.%g' 2 11)
RAW wave "$PORT" "$WAVE_SRC" 4 1 60 >"$TMP/wave" 2>&1 &
WAVE=$!
wait_line "$TMP/wave" '^opened 40'
CODE=$(curl -s -m 10 --interface 127.0.0.12 -o "$TMP/body" -w '%{http_code}' "$URL/health")
check "while 32 slow connections are held: /health from a new address is 200" is "$CODE" 200
raw_request 'GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' --from 127.0.0.3
check "... a 4th connection from a wave address (3 open, quota 8) takes no reserved slot: closed unanswered" \
  is "$(answers)/$RAW_RC" 0/0
CODE=$(curl -s -m 30 --interface 127.0.0.13 -o "$TMP/body" -w '%{http_code}' -H 'Content-Type: application/json' \
  -d '{"prompt":"served beside the slow ones","max_tokens":2,"ignore_eos":true}' "$URL/v1/completions")
check "... a completion from another new address is 200" is "$CODE/$(jq -r .usage.completion_tokens "$TMP/body")" 200/2
check "... the 8 past the limit were closed at once, the 32 let in are still open" wait_line "$TMP/wave" '^open 32$'
check "... none of them by a deadline" \
  is "$(curl -s -m 10 "$URL/metrics" | awk '/^kvtier_http_deadline_closed_total / {print $2}')" 0
check "the access log names the client address" grep -q 'access: GET /health 200 .* client=127.0.0.12' "$TMP/held.log"
kvt_stop_server held; check "held server: exit 0, closing the slow connections" is "$?" 0
wait "$WAVE"
check "... every one of them ($(tail -n 1 "$TMP/wave"))" is "$?" 0

# ---- the header deadline closes slow and idle connections ------------------------------------------
# 4 connections that send a header byte a second never complete their headers: a deadline of 2 s
# closes them (their request deadline is 60 s), though MHD's idle timeout would never fire
kvt_start_server main --header-timeout 2 --request-timeout 60
RAW wave "$PORT" 127.0.0.2 4 1 60 >"$TMP/wave" 2>&1
check "the server closed every slow connection ($(tail -n 1 "$TMP/wave"))" is "$?" 0
check "the header deadline closed them (log)" grep -q 'sent no complete request headers in 2 s' "$TMP/main.log"
check "/metrics counts the 4 the deadline closed" \
  is "$(curl -s -m 10 "$URL/metrics" | awk '/^kvtier_http_deadline_closed_total / {print $2}')" 4
# an idle keep-alive connection is closed by the header deadline too (MHD's idle timeout is 30 s)
raw_request 'GET /health HTTP/1.1\r\nHost: x\r\n\r\n' --wait 40
check "an idle keep-alive connection is answered, then closed by the server" is "$(raw_status)/$RAW_RC" 200/0
check "... by the header deadline" \
  is "$(curl -s -m 10 "$URL/metrics" | awk '/^kvtier_http_deadline_closed_total / {print $2}')" 5

# ---- framing: folded lines and NULs in header lines are 400 + close, the rest is never answered -----
B='{"prompt":"x","max_tokens":1}'
SMUGGLED='GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n'
raw_request "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length:\r\n ${#B}\r\n\r\n$B$SMUGGLED"
check "folded Content-Length: 400, closed" is "$(raw_status)/$RAW_RC" 400/0
check "folded Content-Length: the request behind it is not answered" is "$(answers)" 1
check "folded Content-Length: says why" grep -q 'folded' "$TMP/raw"
raw_request "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: ${#B}\r\n 0\r\n\r\n$B$SMUGGLED"
check "Content-Length with a folded continuation: 400, one answer, closed" is "$(raw_status)/$(answers)/$RAW_RC" 400/1/0
raw_request "GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 0\x00${#SMUGGLED}\r\n\r\n$SMUGGLED"
check "NUL in Content-Length: 400, one answer, closed" is "$(raw_status)/$(answers)/$RAW_RC" 400/1/0
raw_request "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: ${#B}\0 99\r\n\r\n$B$SMUGGLED"
check "NUL in a POST's Content-Length: 400, one answer, closed" is "$(raw_status)/$(answers)/$RAW_RC" 400/1/0
raw_request "GET /health HTTP/1.1\r\nHost: x\r\nX-A: b\r\n\tc\r\n\r\n$SMUGGLED"
check "a folded X- header (tab): 400, one answer, closed" is "$(raw_status)/$(answers)/$RAW_RC" 400/1/0
raw_request "GET /health HTTP/1.1\r\nHost: x\r\nX-A: b\0\r\n\r\n$SMUGGLED"
check "NUL at the end of a header value: 400, one answer, closed" is "$(raw_status)/$(answers)/$RAW_RC" 400/1/0
raw_request "GET /health HTTP/1.1\r\nHost: x\r\nX-A: b\rContent-Length: 5\r\n\r\n$SMUGGLED"
check "bare CR inside a header value: 400, one answer, closed" is "$(raw_status)/$(answers)/$RAW_RC" 400/1/0
raw_request "GET /health HTTP/1.1\r\nHost: x\nX-A: b\r\n\r\n$SMUGGLED"
check "a bare LF line end: 400, one answer, closed" is "$(raw_status)/$(answers)/$RAW_RC" 400/1/0
# well-formed variants stay fine: no space after the colon, tabs, an empty value, trailing spaces, pipelining
raw_request "GET /health HTTP/1.1\r\nHost:x\r\nX-A:\t b \r\nX-E:\r\n\r\nPOST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: ${#B}\r\n\r\n${B}GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
check "well-formed odd spacing and two pipelined requests: three answers" is "$(answers 200)/$RAW_RC" 3/0
kvt_stop_server main; check "main server: exit 0" is "$?" 0

# ---- behind a trusted proxy, each forwarded client has its own quota ------------------------------
# 127.0.0.1 is the proxy; a quota of 2 per address. The proxy holds 2 requests of client 10.0.0.1 (their
# bodies unfinished), then asks for more: 10.0.0.1's third is 429, 10.0.0.2's is served, and the
# proxy's own connections (3 and more) are not held to the quota.
kvt_start_server proxy --trusted-proxy 127.0.0.1,::1 --max-conns-per-ip 2 --drain-timeout 0
RAW hold-post "$PORT" 127.0.0.1 '203.0.113.9, 10.0.0.1' 2 60 >"$TMP/held" 2>&1 &
HELD=$!
wait_line "$TMP/held" '^sent 2'
ask() { # ask FROM XFF: GET /health from FROM with X-Forwarded-For: XFF; the status in $TMP/raw
  raw_request "GET /health HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: $2\r\nConnection: close\r\n\r\n" --from "$1"
}
for _ in $(seq 100); do ask 127.0.0.1 10.0.0.1; [ "$(raw_status)" = 429 ] && break; sleep 0.1; done
check "proxied client 10.0.0.1 with 2 requests open: its third is 429" is "$(raw_status)" 429
check "... with Retry-After" grep -qi '^Retry-After:' "$TMP/raw"
ask 127.0.0.1 10.0.0.2
check "proxied client 10.0.0.2: 200 on the proxy's third connection" is "$(raw_status)" 200
ask 127.0.0.1 '10.0.0.3, 127.0.0.1'
check "a chain ending in the trusted proxy: the entry before it is the client (200)" is "$(raw_status)" 200
ask 127.0.0.5 10.0.0.1
check "X-Forwarded-For from an untrusted address is ignored (200)" is "$(raw_status)" 200
ask 127.0.0.1 '10.0.0.1, not-an-address'
check "a forwarded entry that is no address: 400 naming X-Forwarded-For" \
  is "$(raw_status)/$(grep -ac 'X-Forwarded-For' "$TMP/raw")" 400/1
check "access log: the forwarded client" grep -q 'access: GET /health 200 .* client=10.0.0.2' "$TMP/proxy.log"
check "access log: the chain's client" grep -q 'access: GET /health 200 .* client=10.0.0.3' "$TMP/proxy.log"
check "access log: the untrusted peer, not its X-Forwarded-For" grep -q 'access: GET /health 200 .* client=127.0.0.5' "$TMP/proxy.log"
kvt_stop_server proxy; check "proxy server: exit 0" is "$?" 0
wait "$HELD"

kvt_test_done test_server_slowloris
