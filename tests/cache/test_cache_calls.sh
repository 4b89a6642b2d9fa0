#!/usr/bin/env bash
# The calls between the files of the cache's tier folders (src/cache/disk, src/cache/remote) run
# one way, down: no file of a tier calls back into the tier's front file (tier_disk.c,
# tier_remote.c), and no files of a tier call each other in a circle. Nor do the files of the
# cache policy itself (the .c files at the top of src/cache): a circle there means no file can
# be read or changed without the others of the circle. Read from the built
# library (nm on libkvt_cache.a beside the binary): file A calls file B when A's object leaves
# undefined a symbol that B's defines.
set -u
export LC_ALL=C # sort and join agree on the order
SRC=${KVT_SRC:?KVT_SRC must point to the source tree}
LIB=$(dirname "${KVT_BIN:?KVT_BIN must point to the kvtier binary}")/libkvt_cache.a
command -v python3 >/dev/null || { echo "SKIP: needs python3 (scripts/setup.sh installs it)"; exit 77; }
command -v nm >/dev/null || { echo "SKIP: needs nm (binutils)"; exit 77; }
[ -f "$LIB" ] || { echo "SKIP: no $LIB (the cache layer's library, built beside the binary)"; exit 77; }
. "$(dirname "$0")/../testutil.sh"

# calls.py EDGES FOLDER=FRONT...: reads "A B" lines (file A calls file B, object names without
# .c.o) and, for each tier folder with its front file and the files in it (FOLDER=FRONT:F1,F2..),
# prints "up A -> FRONT" for a call back into the front and "circle A -> B -> ... -> A" for each
# group of the tier's files that call each other in a circle
cat >"$TMP/calls.py" <<'EOF'
import sys

edges = [l.split() for l in open(sys.argv[1]) if l.strip()]
for spec in sys.argv[2:]:
    front, files = spec.split('=', 1)[1].split(':')
    files = set(files.split(','))
    out = {f: sorted({b for a, b in edges if a == f and b in files and b != f}) for f in files}
    for f in sorted(files):
        if f != front and front in out[f]:
            print('up %s -> %s' % (f, front))
    # Tarjan's strongly connected components; one of more than one file is a circle
    index, low, stack, on, n = {}, {}, [], set(), [0]
    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in out[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                print('circle ' + ' -> '.join(sorted(group)))
    for f in sorted(files):
        if f not in index:
            visit(f)
EOF

# the file graph: symbol owners from the defined globals, then each object's undefined symbols
nm -A --defined-only -g "$LIB" 2>/dev/null | awk '{split($1, p, ":"); sub(/\.c\.o$/, "", p[2]); print $NF, p[2]}' |
  sort -u >"$TMP/defs"
nm -A -u "$LIB" 2>/dev/null | awk '{split($1, p, ":"); sub(/\.c\.o$/, "", p[2]); print $NF, p[2]}' | sort -u >"$TMP/undefs"
join "$TMP/undefs" "$TMP/defs" | awk '$2 != $3 {print $2, $3}' | sort -u >"$TMP/edges"
tier() { # tier FOLDER FRONT: the calls.py spec of src/cache/FOLDER (FRONT may be empty: none)
  local files
  files=$(find "$SRC/src/cache/$1" -maxdepth 1 -name '*.c' -printf '%f\n' | sed 's/\.c$//' | sort | paste -sd,)
  echo "$1=$2:$files"
}
disk=$(tier disk tier_disk)
remote=$(tier remote tier_remote)
policy=$(tier . '') # no front: cache.c is where the public calls come in, and others may share its helpers
check "the disk tier's files include its front and its record index" \
  is "$(tr , '\n' <<<"${disk#*:}" | grep -cxE 'tier_disk|disk_index')" 2
check "the graph has the disk writer's calls into the record index" grep -qx 'disk_writer disk_index' "$TMP/edges"

bad_calls=$(python3 "$TMP/calls.py" "$TMP/edges" "$disk" "$remote")
check "the tiers' files call down only${bad_calls:+: $bad_calls}" is "$bad_calls" ""

# the check itself can fail: a planted call from the reader back into the front, and a circle
{ cat "$TMP/edges"; echo "disk_read tier_disk"; echo "disk_index disk_ckpt"; echo "disk_ckpt disk_index"; } \
  >"$TMP/planted"
planted=$(python3 "$TMP/calls.py" "$TMP/planted" "$disk" | sort | paste -sd';')
check "the checker finds a planted call back up and the circles it and a planted pair make" \
  is "$planted" "circle disk_ckpt -> disk_index;circle disk_read -> tier_disk;up disk_read -> tier_disk"

check "the policy's files include restore, reclaim and sessions" \
  is "$(tr , '\n' <<<"${policy#*:}" | grep -cxE 'cache_restore|cache_demote|cache_session')" 3
check "the graph has the restore path's call into reclaim" grep -qx 'cache_restore cache_demote' "$TMP/edges"
policy_circles=$(python3 "$TMP/calls.py" "$TMP/edges" "$policy")
echo "circles among the cache policy's files: $(grep -c . <<<"$policy_circles")"
check "the policy's files call each other in no circle${policy_circles:+: $policy_circles}" is "$policy_circles" ""
# ... and that check can fail: reclaim planted calling back up into restore closes a circle
{ cat "$TMP/edges"; echo "cache_demote cache_restore"; } >"$TMP/planted_policy"
check "the checker finds a circle planted among the policy's files" \
  is "$(python3 "$TMP/calls.py" "$TMP/planted_policy" "$policy")" "circle cache_demote -> cache_restore"
kvt_test_done test_cache_calls
