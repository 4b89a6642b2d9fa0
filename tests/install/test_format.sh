#!/usr/bin/env bash
# The C sources keep the style of .clang-format: clang-format 14 (Debian 12's, which
# scripts/setup.sh installs) changes nothing in src/, include/, tests/, bench/ or fuzz/. A
# contributor formats what they change with `git clang-format` (CONTRIBUTING.md). Another
# clang-format major version may format differently, so the test skips with any other.
set -u
SRC=${KVT_SRC:?KVT_SRC must point to the source tree}
. "$(dirname "$0")/../testutil.sh"
command -v clang-format >/dev/null || { echo "SKIP: clang-format is not installed (scripts/setup.sh installs it)"; exit 77; }
ver=$(clang-format --version | sed -n 's/.*version \([0-9]*\).*/\1/p')
[ "$ver" = 14 ] || { echo "SKIP: clang-format $ver, not 14: the style is tuned for 14"; exit 77; }
cd "$SRC"
files=$(find src include tests bench fuzz -name '*.[ch]' -not -path 'fuzz/corpus/*' | sort)
unformatted=
# one run over every file; only when it finds something, one run per file to name them
if ! clang-format --dry-run --Werror $files >/dev/null 2>&1; then
  unformatted=$(for f in $files; do clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || echo "$f"; done)
fi
check "every C source is formatted (git clang-format fixes: ${unformatted:-none})" is "$unformatted" ""
# the check itself can fail: a planted misformatted copy of a real file
mkdir -p "$TMP/fmt"
sed 's/^    /  /' "$SRC/src/base/common.c" >"$TMP/fmt/common.c"
cp "$SRC/.clang-format" "$TMP/fmt/"
check "a misformatted file is found" expect_rc 1 clang-format --dry-run --Werror "$TMP/fmt/common.c"
kvt_test_done test_format
