#!/usr/bin/env bash
# The code-shape rules of STYLE.md and issue 15, checked on every run so they cannot drift:
# no source file in src/ over 800 lines, and no function over 80 lines without a "Long:"
# reason in the comment above it (scripts/long_functions.py).
set -u
SRC=${KVT_SRC:?KVT_SRC must point to the source tree}
command -v python3 >/dev/null || { echo "SKIP: needs python3 (scripts/setup.sh installs it)"; exit 77; }
. "$(dirname "$0")/../testutil.sh"
big=$(find "$SRC/src" -name '*.[ch]' -exec wc -l {} + | awk '$2 != "total" && $1 > 800 {print $2 " (" $1 " lines)"}')
check "no file in src/ over 800 lines${big:+: $big}" is "$big" ""
out=$(python3 "$SRC/scripts/long_functions.py" "$SRC/src" 2>&1)
check "no function over 80 lines without a Long: reason" is "$?" 0 || echo "$out" >&2
# the checker itself can fail: at a limit of 20 lines it must find functions
python3 "$SRC/scripts/long_functions.py" --limit 20 "$SRC/src" >/dev/null 2>&1
check "long_functions.py finds functions over a 20-line limit" is "$?" 1
# the cache and the runtime reach page bytes only through the engine's run-level page I/O
# (kvt_pages_copy_*, the kvt_page_host fast path), never kvt_page_data(), so an engine whose
# pages live in device memory can be dropped in
direct=$(grep -rlE 'kvt_page_data(_const)?\b' "$SRC/src/cache" "$SRC/src/runtime" 2>/dev/null | sed "s|$SRC/||")
check "no kvt_page_data* in src/cache or src/runtime${direct:+: $direct}" is "$direct" ""
# the check itself can fail: the engine does use it
grep -rqE 'kvt_page_data(_const)?\b' "$SRC/src/engine"
check "the page-data grep finds the engine's own uses" is "$?" 0
kvt_test_done test_code_rules
