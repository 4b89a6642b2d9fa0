# Shared harness of the shell tests (the shell twin of testutil.c): source it
# after setting BIN; it makes $TMP (removed at exit), counts checks, and
# kvt_test_done ends the test: a failed check or no check at all fails it.
BIN=${KVT_BIN:?KVT_BIN must point to the kvtier binary}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass=0 fail=0
check() { # check DESCRIPTION COMMAND...
  local d=$1; shift
  if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $d" >&2; fi
}
kvt_test_done() { # kvt_test_done NAME
  echo "$1: $pass passed, $fail failed"
  [ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
}
