#!/usr/bin/env bash
# The code-shape rules of STYLE.md, checked on every run so they cannot drift: no source file
# in src/ over 800 lines, no function over 80 lines without a "Long:" reason in the comment
# above it (scripts/long_functions.py), no #include that climbs out of its folder with "../",
# the page bytes reached only through the engine's page I/O, and the SPDX line atop each C file.
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
# a source file includes a header by its name alone: the build puts each layer's folder on the
# include path of the layers allowed to use it, so "../layer/x.h" would reach a header past the
# layer rule (docs/design.md "The layer rule") and break when a file moves
up_includes() { # up_includes DIR: every '#include "../' line under DIR, as FILE:LINE:TEXT relative to DIR
  grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"\.\./' "$1" --include='*.[ch]' | sed "s|$1/||"
}
up=$(up_includes "$SRC/src")
check "no #include \"../ in src/${up:+: $up}" is "$up" ""
# the check itself can fail: a copy of a real source file with one such line planted in it
mkdir -p "$TMP/src/cache"
{ echo '#include "../base/log.h"'; cat "$SRC/src/cache/tier.h"; } >"$TMP/src/cache/tier.h"
check "the include grep finds a planted #include \"../" is "$(up_includes "$TMP/src" | cut -d: -f1,2)" "cache/tier.h:1"
# a private header (*_internal.h, *_impl.h) is included only by the files of its own folder and
# the folders under it: the layer's parts in subfolders (src/cache/disk, src/server/http) share
# the layer's include path, so nothing else keeps one part from reaching past another's contract
# header; a layer's own private header (server_impl.h) serves its parts
private_includes() { # private_includes DIR: FILE:LINE:TEXT (relative to DIR) of each such include from another folder
  grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"/]*_(internal|impl)\.h"' "$1" --include='*.[ch]' |
    while IFS=: read -r file line text; do
      h=$(sed -E 's/.*"([^"]*)".*/\1/' <<<"$text")
      d=$(dirname "$file") found=0
      while [ "$d" != "$1" ] && [ "$d" != / ]; do
        [ -e "$d/$h" ] && { found=1; break; }
        d=$(dirname "$d")
      done
      [ $found = 1 ] || echo "${file#"$1"/}:$line:$text"
    done
}
leak=$(private_includes "$SRC/src")
check "private headers included only in their own folder${leak:+: $leak}" is "$leak" ""
# the check itself can fail: a planted file of the cache's top folder that includes the disk part's
mkdir -p "$TMP/priv/cache/disk"
cp "$SRC/src/cache/disk/disk_internal.h" "$TMP/priv/cache/disk/"
{ echo '#include "disk_internal.h"'; cat "$SRC/src/cache/tier.h"; } >"$TMP/priv/cache/tier.h"
check "the private-header check finds a planted include" is "$(private_includes "$TMP/priv" | cut -d: -f1,2)" "cache/tier.h:1"
# every C source carries the license's SPDX line first (LICENSE: MIT)
no_spdx() { # no_spdx DIR...: the .c/.h files under DIR whose first line is not the SPDX line
  find "$@" -name '*.[ch]' | while read -r f; do
    [ "$(head -n 1 "$f")" = "// SPDX-License-Identifier: MIT" ] || echo "${f#"$SRC"/}"
  done
}
missing=$(no_spdx "$SRC/src" "$SRC/include" "$SRC/tests" "$SRC/bench" "$SRC/fuzz" | head -n 5)
check "every .c/.h starts with the SPDX line${missing:+: $missing}" is "$missing" ""
# the check itself can fail: the planted copy above does not start with it
check "the SPDX check finds a file without the line" is "$(no_spdx "$TMP/src" | sed "s|^$TMP/||")" "src/cache/tier.h"
kvt_test_done test_code_rules
