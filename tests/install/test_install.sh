#!/usr/bin/env bash
# `cmake --install` into a temporary prefix, then only the installed files:
# the library exports exactly kvtier.h's functions (SONAME from KVT_VERSION),
# no internal header is installed or needed, examples/embed.c compiles with
# `pkg-config --cflags --libs kvtier` (shared) and against libkvtier.a
# (static), and runs: the second prompt reuses the first one's prefix, a
# second process finds it on disk (T2) with the same greedy text. Then the man
# page: it renders without warnings and names every option of every --help.
set -u
. "${KVT_SRC:?KVT_SRC must point to the source tree}/tests/testutil.sh"
SRC=${KVT_SRC:?KVT_SRC must point to the source tree}
BUILD=$(cd "$(dirname "$BIN")" && pwd)
for tool in cc pkg-config nm readelf; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed (scripts/setup.sh installs it)"; exit 77; }
done

# A sanitizer build's library needs its runtime: the embedder is built with the same flag (as a
# real embedder of such a build would be), not skipped.
SAN=()
grep -q '^KVT_SANITIZE:BOOL=ON' "$BUILD/CMakeCache.txt" && SAN=(-fsanitize=address,undefined)
grep -q '^KVT_TSAN:BOOL=ON' "$BUILD/CMakeCache.txt" && SAN=(-fsanitize=thread)

P=$TMP/prefix
check "cmake --install" cmake --install "$BUILD" --prefix "$P"
PC=$(find "$P" -name kvtier.pc | head -1)
LIBDIR=$(dirname "$(find "$P" -name libkvtier.a | head -1)")
check "kvtier.pc installed" test -f "$PC"
check "binary installed" test -x "$P/bin/kvtier"
check "static library installed" test -f "$LIBDIR/libkvtier.a"
check "shared library installed" test -f "$LIBDIR/libkvtier.so"
check "man page installed" test -f "$P/share/man/man1/kvtier.1"
check "only the public header is installed" test "$(cd "$P/include" && find . -type f)" = "./kvtier.h"
other_includes() { grep '^#include' "$P/include/kvtier.h" | grep -v -e '<stddef.h>' -e '<stdint.h>'; }
check "kvtier.h includes only standard headers" test -z "$(other_includes)"

# the version, and so the SONAME, come from KVT_VERSION in kvtier.h
ver=$(sed -n 's/^#define KVT_VERSION "\(.*\)"/\1/p' "$P/include/kvtier.h")
soname=$(readelf -d "$LIBDIR/libkvtier.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
check "SONAME libkvtier.so.${ver%%.*} (got '$soname')" test "$soname" = "libkvtier.so.${ver%%.*}"
check "libkvtier.so.$ver exists" test -f "$LIBDIR/libkvtier.so.$ver"
export PKG_CONFIG_PATH=$(dirname "$PC")
check "pkg-config version $ver" test "$(pkg-config --modversion kvtier)" = "$ver"
# a shared link needs none of the static-only libraries' .pc files (their -dev packages)
check "pkg-config --cflags --libs kvtier with kvtier.pc alone" \
  env PKG_CONFIG_LIBDIR="$(dirname "$PC")" pkg-config --cflags --libs kvtier

# exported symbols = the functions kvtier.h marks KVT_API (visibility hidden for the rest)
grep -A3 '^KVT_API' "$P/include/kvtier.h" | tr '\n' ' ' | grep -o 'KVT_API[^(]*(' | grep -o 'kvt_[a-z0-9_]*($' |
  tr -d '(' | sort -u >"$TMP/declared"
nm -D --defined-only "$LIBDIR/libkvtier.so" | awk '$2 ~ /^[TWV]$/ {print $3}' | sort -u >"$TMP/exported"
check "kvtier.h declares functions ($(wc -l <"$TMP/declared"))" test "$(wc -l <"$TMP/declared")" -gt 20
check "libkvtier.so exports exactly kvtier.h's functions" diff "$TMP/declared" "$TMP/exported"
# the library neither holds nor needs cJSON (the JSON-schema compiler that reads it is the server's):
# no cJSON_ symbol defined or undefined, no libcjson among its needed libraries or on either link line
no_cjson_symbols() { ! nm -D "$LIBDIR/libkvtier.so" | grep -q cJSON_ && ! nm "$LIBDIR/libkvtier.a" 2>/dev/null | grep -q cJSON_; }
check "libkvtier.so and libkvtier.a have no cJSON_ symbols" no_cjson_symbols
check "libkvtier.so does not need libcjson" sh -c "! readelf -d '$LIBDIR/libkvtier.so' | grep -q 'NEEDED.*cjson'"
check "pkg-config --libs kvtier names no cJSON" sh -c "! pkg-config --libs --static kvtier | grep -q cjson"

# the example, built from a copy outside the source tree with the installed files only
cp "$SRC/examples/embed.c" "$TMP/embed.c"
build_shared() {
  cc -std=c11 -Wall -Wextra -Werror "${SAN[@]}" "$TMP/embed.c" $(pkg-config --cflags --libs kvtier) \
    -Wl,-rpath,"$LIBDIR" -o "$TMP/embed"
}
build_static() {
  cc -std=c11 -Wall -Wextra -Werror "${SAN[@]}" "$TMP/embed.c" $(pkg-config --cflags kvtier) "$LIBDIR/libkvtier.a" \
    $(pkg-config --static --libs kvtier | sed 's/-lkvtier\b//') -o "$TMP/embed_static"
}
check "embed.c builds against libkvtier.so (pkg-config --cflags --libs kvtier)" build_shared
check "embed.c builds against libkvtier.a (pkg-config --static --libs)" build_static
uses_installed_so() { ldd "$TMP/embed" | grep -q "libkvtier.so.${ver%%.*} => $LIBDIR/"; }
check "the shared build loads the installed libkvtier.so" uses_installed_so

M=$TMP/m.gguf
check "installed kvtier mkmodel" "$P/bin/kvtier" mkmodel -o "$M" --seed 7
cached() { # cached OUT N: request N's cached tokens
  sed -n "s/^request $2: prompt [0-9]* tokens, cached \([0-9]*\) .*/\1/p" "$1"
}
tier() { # tier OUT N T: request N's tokens from tier T
  sed -n "s/^request $2: .*[(, ]$3 \([0-9]*\)[,)].*/\1/p" "$1"
}
text() { grep -a "^request $2 text:" "$1"; }
KV=$TMP/kv
check "embed runs (shared)" "$TMP/embed" "$M" "$KV" >"$TMP/out1" 2>"$TMP/err1"
check "embed runs (static)" "$TMP/embed_static" "$M" >"$TMP/out_static" 2>&1
c1=$(cached "$TMP/out1" 1) c2=$(cached "$TMP/out1" 2)
check "first prompt is cold (cached '$c1')" test "${c1:-x}" = 0
check "second prompt reuses the shared prefix (cached '$c2')" test "${c2:-0}" -gt 0
check "... from T0 ($(tier "$TMP/out1" 2 T0))" test "$(tier "$TMP/out1" 2 T0)" = "$c2"
same_requests() { diff <(grep -a "^request" "$1") <(grep -a "^request" "$2"); }
check "static and shared builds print the same" same_requests "$TMP/out1" "$TMP/out_static"
# a second process: the first prompt now comes from disk, and greedy text is the cold run's
check "embed runs again on the same disk directory" "$TMP/embed" "$M" "$KV" >"$TMP/out2" 2>"$TMP/err2"
t2=$(tier "$TMP/out2" 1 T2)
check "restart: first prompt restored from T2 (T2 '$t2')" test "${t2:-0}" -gt 0
check "restart: same greedy text as the cold run" test "$(text "$TMP/out1" 1)" = "$(text "$TMP/out2" 1)"
check "embed without a model is a usage error" test "$("$TMP/embed" >/dev/null 2>&1; echo $?)" = 2
check "embed with a bad model fails cleanly" test "$("$TMP/embed" "$TMP/embed.c" >/dev/null 2>&1; echo $?)" = 1

# the man page: renders without warnings and contains every option every --help names
MAN=$P/share/man/man1/kvtier.1
if command -v groff >/dev/null; then
  check "man page renders without warnings" test -z "$(groff -man -Tascii -ww -z "$MAN" 2>&1)"
  groff -man -Tascii -P-cbou "$MAN" 2>/dev/null >"$TMP/man.txt"
else
  echo "note: groff is not installed; checking the man page's source, unrendered" >&2
  sed -e 's/\\-/-/g' -e 's/\\f[BIR]//g' -e 's/\\e/\\/g' -e 's/\\&//g' "$MAN" >"$TMP/man.txt"
fi
check "man page is the build's --man" cmp -s "$MAN" <("$BIN" --man)
opts_of() { # the options a --help text names
  "$@" --help 2>&1 | grep -oE '(^|[][ ,(|])--?[A-Za-z][A-Za-z0-9-]*' | sed -E 's/^[][ ,(|]//' | sort -u
}
missing=""
n_opts=0
for cmd in "" run serve eval info tokenize cache lint mkmodel; do
  for o in $(opts_of "$BIN" $cmd); do
    n_opts=$((n_opts + 1))
    grep -qF -- "$o" "$TMP/man.txt" || missing="$missing ${cmd:-kvtier}:$o"
  done
done
check "the --help texts name options ($n_opts)" test "$n_opts" -gt 100
check "every option of every --help is in the man page (missing:$missing)" test -z "$missing"
for o in --kv-disk-live-window --max-inflight-bytes --api-key-file KVTIER_CTX_SIZE; do
  check "man page has $o" grep -qF -- "$o" "$TMP/man.txt"
done

kvt_test_done test_install
