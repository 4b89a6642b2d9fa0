#!/usr/bin/env bash
# T3 with Redis's password in a file (--kv-remote-password-file) rather than
# the URL, on one redis-server this test starts with a password on the default
# user and an ACL user: node A logs in as the default user with the file, node
# B as the ACL user (user@ in the URL, the file through its environment
# variable) and gets T3 hits for A's prompt; `kvtier cache stats` takes the
# file too. A wrong password stops start-up saying the credentials were
# refused; a symbolic link, a missing, empty or group-readable file, and a
# URL with a password of its own plus the file are clear errors. No password
# shows in any output, log, /v1/cache/stats or /metrics.
set -u
command -v redis-server >/dev/null || { echo "SKIP: redis-server is not installed (apt-get install redis-server)"; exit 77; }
command -v curl >/dev/null && command -v jq >/dev/null || { echo "SKIP: needs curl and jq"; exit 77; }
. "$(dirname "$0")/../testutil.sh"

kvt_t3_setup
PW=Default-Pw-4711 UPW=Acl-User-Pw-0815 BADPW=not-the-Pw-99
redis-cli -p "$RPORT" ACL SETUSER kvtu on ">$UPW" '~*' '+@all' >/dev/null
redis-cli -p "$RPORT" CONFIG SET requirepass "$PW" >/dev/null
check "redis now wants a password" test "$(redis-cli -p "$RPORT" ping 2>&1 | grep -c NOAUTH)" = 1
rcli() { redis-cli --no-auth-warning -a "$PW" -p "$RPORT" "$@"; }

(umask 077
 printf '%s\n' "$PW" >"$TMP/pw"     # a trailing newline, as editors write it
 printf '%s' "$UPW" >"$TMP/upw"     # none
 printf '%s\n' "$BADPW" >"$TMP/bad"
 : >"$TMP/empty")
ln -s "$TMP/pw" "$TMP/link"
printf '%s\n' "$PW" >"$TMP/open" && chmod 640 "$TMP/open"

RURL="redis://127.0.0.1:$RPORT"
T3=(--kv-remote-key-file "$TMP/key" --kv-remote-timeout-ms 10000)
KVT_SERVE_ARGS=(-m "$TMP/m.gguf" --host 127.0.0.1 -t 1)
LONG="A long and fixed system prompt that every request of this service starts with: you are a careful assistant that answers questions about the tiered key-value cache and its shared remote tier."
ask() {
  curl -s -m 60 -H 'Content-Type: application/json' \
    -d "{\"prompt\":\"$LONG\",\"max_tokens\":8,\"temperature\":0}" "$1/v1/completions" >"$2"
}
t3() { jq -r '.kvtier.cached_tokens_by_tier.T3' "$1"; }

kvt_start_server A --kv-remote "$RURL" --kv-remote-password-file "$TMP/pw" "${T3[@]}" --write-through
KVTIER_KV_REMOTE_PASSWORD_FILE=$TMP/upw kvt_start_server B --kv-remote "redis://kvtu@127.0.0.1:$RPORT" "${T3[@]}" \
  --restore always
ask "${KVT_URL[A]}" "$TMP/a.json"
check "A computed the prompt" test "$(t3 "$TMP/a.json")" = 0
curl -s -m 60 -X POST -H 'Content-Type: application/json' -d '' "${KVT_URL[A]}/v1/cache/flush" >/dev/null
check "A's blocks reached Redis through its login" test "$(rcli --scan --pattern 'kvt:*' | wc -l)" -gt 0
ask "${KVT_URL[B]}" "$TMP/b.json"
check "B (ACL user, file from the environment) gets T3 hits" test "$(t3 "$TMP/b.json")" -gt 0
check "B's output equals A's" test "$(jq -r '.choices[0].text' "$TMP/b.json")" = "$(jq -r '.choices[0].text' "$TMP/a.json")"
curl -s "${KVT_URL[B]}/v1/cache/stats" >"$TMP/stats.json"
check "B's T3 is connected" test "$(jq -r '.T3.connected' "$TMP/stats.json")" = true
curl -s "${KVT_URL[A]}/v1/cache/stats" >>"$TMP/stats.json"
curl -s "${KVT_URL[A]}/metrics" >"$TMP/metrics.txt"
curl -s "${KVT_URL[B]}/metrics" >>"$TMP/metrics.txt"
check "metrics: T3 connected" grep -q '^kvtier_remote_connected 1' "$TMP/metrics.txt"

"$BIN" cache stats --kv-remote "$RURL" --kv-remote-password-file "$TMP/pw" >"$TMP/cstats.txt" 2>&1
check "cache stats logs in with the file" grep -q '^remote: [1-9][0-9]* values' "$TMP/cstats.txt"
KVTIER_KV_REMOTE_PASSWORD_FILE=$TMP/upw "$BIN" cache stats --kv-remote "redis://kvtu@127.0.0.1:$RPORT" \
  >>"$TMP/cstats.txt" 2>&1
check "... and as the ACL user with the file from the environment" test "$(grep -c '^remote: [1-9]' "$TMP/cstats.txt")" = 2
"$BIN" cache stats --kv-remote "$RURL" >"$TMP/nopw.txt" 2>&1
check "cache stats without the password cannot log in" grep -q 'cannot log in' "$TMP/nopw.txt"
"$BIN" cache stats --kv-remote "$RURL" --kv-remote-password-file "$TMP/bad" >"$TMP/badstats.txt" 2>&1
check "cache stats with a wrong password fails" test $? -ne 0

# fails NAME PATTERN ARGS...: serve exits at start-up, its output matching PATTERN
fails() {
  local name=$1 pat=$2
  shift 2
  timeout 120 "$BIN" serve --port 0 "${KVT_SERVE_ARGS[@]}" "${T3[@]}" "$@" >"$TMP/$name.log" 2>&1
  local rc=$?
  [ "$rc" != 0 ] && [ "$rc" != 124 ] && grep -q -- "$pat" "$TMP/$name.log"
}
check "a wrong password stops start-up" \
  fails wrong 'refused the credentials' --kv-remote "$RURL" --kv-remote-password-file "$TMP/bad"
check "... naming the file to check" grep -q -- '--kv-remote-password-file' "$TMP/wrong.log"
check "a wrong ACL user's password too" \
  fails wronguser 'refused the credentials' --kv-remote "redis://kvtu@127.0.0.1:$RPORT" --kv-remote-password-file "$TMP/pw"
check "a symbolic link is refused" fails link 'symbolic link' --kv-remote "$RURL" --kv-remote-password-file "$TMP/link"
check "a missing file is a clear error" \
  fails missing "password-file $TMP/nothere: No such file" --kv-remote "$RURL" --kv-remote-password-file "$TMP/nothere"
check "an empty file is a clear error" fails empty 'is empty' --kv-remote "$RURL" --kv-remote-password-file "$TMP/empty"
check "a group-readable file is refused" fails open 'chmod 600' --kv-remote "$RURL" --kv-remote-password-file "$TMP/open"
check "a URL with a password and the file is a usage error naming both" \
  fails both 'carries a password and --kv-remote-password-file' --kv-remote "redis://:$PW@127.0.0.1:$RPORT" \
  --kv-remote-password-file "$TMP/pw"
check "a user@ with no file asks for the password" \
  fails useronly 'kv-remote-password-file' --kv-remote "redis://kvtu@127.0.0.1:$RPORT"

for n in "${!KVT_PID[@]}"; do kvt_stop_server "$n"; done
# every output, log and response this test kept
leaks=$(grep -l -a -e "$PW" -e "$UPW" -e "$BADPW" "$TMP"/*.log "$TMP"/*.txt "$TMP"/*.json 2>/dev/null)
check "no password in any output, log, stats or metrics" test -z "$leaks"
[ -z "$leaks" ] || echo "password in: $leaks" >&2
kvt_stop_redis
kvt_test_done test_server_remote_password
