#!/usr/bin/env bash
# The cache directory is ours alone, checked through the CLI: symlinks planted
# in it under every name kvtier writes (lock, header.tmp, .odirect-probe, stats.tmp,
# a segment, a gc temp file) never lead a write outside it; the MAC key file is
# 0600 and --kv-disk-no-mac works without one; a FIFO named like
# a segment hangs nothing; a directory writable by others or owned by another
# user is refused with a message that says why and how to fix it.
set -u
. "$(dirname "$0")/../testutil.sh"

M=$TMP/m.gguf
"$BIN" mkmodel -o "$M" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 --vocab 800 2>/dev/null
printf 'precious bytes outside the cache directory\n' > "$TMP/victim"
cp "$TMP/victim" "$TMP/victim.orig"
intact() { cmp -s "$TMP/victim" "$TMP/victim.orig"; }
for i in 1 2 3; do echo "a shared system prompt that is long enough to fill blocks: question $i about tiers"; done > "$TMP/prompts.txt"
RUN=("$BIN" run -m "$M" -f "$TMP/prompts.txt" -n 8 --temp 0 --block-size 8 --kv-disk-size 64M --kv-disk-admit-all --write-through)
"${RUN[@]}" --no-cache > "$TMP/cold.out" 2>/dev/null

D=$TMP/cache
# a cache directory kvtier made (only such a one, or an empty one, is used), whose header then names
# another namespace, so that the next run rewrites it through header.tmp
"${RUN[@]}" --kv-disk "$D" > /dev/null 2>&1
check "the first run makes the cache dir" test -f "$D/header"
sed -i 's/^namespace .*/namespace 00000000000000000000000000000001/' "$D/header"
# links under the names of every temporary and of a segment
for n in header.tmp .odirect-probe stats.tmp seg-0000000000000000.kvt.tmp seg-00000000000000ff.kvt; do
  ln -s "$TMP/victim" "$D/$n"
done
"${RUN[@]}" --kv-disk "$D" > "$TMP/run1.out" 2> "$TMP/run1.err"
check "run beside planted links succeeds" test $? -eq 0
check "run beside planted links equals a cold run" cmp -s "$TMP/cold.out" "$TMP/run1.out"
check "the victim is unchanged after the first run" intact
check "the planted segment link is reported, not followed" grep -q "seg-00000000000000ff.kvt is a symbolic link" "$TMP/run1.err"
ln -s "$TMP/victim" "$D/stats.tmp"
"${RUN[@]}" --kv-disk "$D" --restore always > "$TMP/run2.out" 2> "$TMP/run2.err"
check "restarted run equals a cold run" cmp -s "$TMP/cold.out" "$TMP/run2.out"
t2=$(grep -m1 '\[1/3\]' "$TMP/run2.err" | sed -n 's/.*T2 \([0-9]*\)).*/\1/p')
check "the restart is served from disk (T2 ${t2:-0} tokens)" test "${t2:-0}" -gt 0
check "the victim is unchanged after the second run" intact

check "the directory's MAC key file is 0600 ($(stat -c %a "$D/key" 2>/dev/null))" test "$(stat -c %a "$D/key" 2>/dev/null)" = 600

# --kv-disk-no-mac: no key, records without a MAC, still served across a restart
"${RUN[@]}" --kv-disk "$TMP/nomac" --kv-disk-no-mac > /dev/null 2>&1
"${RUN[@]}" --kv-disk "$TMP/nomac" --kv-disk-no-mac --restore always > "$TMP/nomac.out" 2> "$TMP/nomac.err"
check "--kv-disk-no-mac: a restart equals a cold run" cmp -s "$TMP/cold.out" "$TMP/nomac.out"
t2=$(grep -m1 '\[1/3\]' "$TMP/nomac.err" | sed -n 's/.*T2 \([0-9]*\)).*/\1/p')
check "--kv-disk-no-mac: served from disk (T2 ${t2:-0} tokens)" test "${t2:-0}" -gt 0
check "--kv-disk-no-mac: no key file" test ! -e "$TMP/nomac/key"

# cache gc writes seg-*.kvt.tmp for every segment it rewrites: plant links under those names
for s in "$D"/seg-*.kvt; do [ -L "$s" ] || ln -sf "$TMP/victim" "$s.tmp"; done
"$BIN" cache gc --kv-disk "$D" --all-namespaces > "$TMP/gc.out" 2>&1
check "cache gc beside planted links succeeds" test $? -eq 0
"$BIN" cache stats --kv-disk "$D" > "$TMP/stats.out" 2>&1
check "cache stats succeeds" test $? -eq 0
"$BIN" cache verify --kv-disk "$D" > "$TMP/verify.out" 2>&1
check "cache verify finds every record valid" test $? -eq 0
check "the victim is unchanged after gc, stats and verify" intact

# a lock that is a link: refused with a clear message, the victim untouched
rm -f "$D/lock"
ln -s "$TMP/victim" "$D/lock"
"${RUN[@]}" --kv-disk "$D" > /dev/null 2> "$TMP/lock.err"
check "a linked lock file is refused" test $? -ne 0
check "the refusal says the lock is a symbolic link" grep -q "lock is a symbolic link" "$TMP/lock.err"
"$BIN" cache gc --kv-disk "$D" > "$TMP/gc_lock.out" 2>&1
check "cache gc refuses a linked lock" test $? -ne 0
check "cache gc prints no summary after refusing" bash -c "! grep -q kept '$TMP/gc_lock.out'"
"$BIN" cache clear --kv-disk "$D" > /dev/null 2>&1
check "cache clear refuses a linked lock" test $? -ne 0
check "the victim is unchanged after the lock attempts" intact
rm -f "$D/lock"

# a FIFO named like a segment: skipped, nothing waits on it
mkfifo "$D/seg-0000000000000fff.kvt"
timeout 20 "$BIN" cache stats --kv-disk "$D" > /dev/null 2>&1
check "cache stats does not hang on a FIFO (rc $?)" test $? -eq 0
timeout 20 "$BIN" cache verify --kv-disk "$D" > /dev/null 2>&1
check "cache verify does not hang on a FIFO" test $? -eq 0
timeout 60 "${RUN[@]}" --kv-disk "$D" --restore always > "$TMP/fifo.out" 2>/dev/null
check "run does not hang on a FIFO and equals a cold run" cmp -s "$TMP/cold.out" "$TMP/fifo.out"
"$BIN" cache clear --kv-disk "$D" > /dev/null 2>&1
check "cache clear removes the planted names" test ! -e "$D/seg-0000000000000fff.kvt" -a ! -L "$D/seg-00000000000000ff.kvt"
check "the victim is unchanged at the end" intact

# a new directory is created 0700
"${RUN[@]}" --kv-disk "$TMP/fresh/kv" > /dev/null 2>&1
check "a new cache dir is created 0700 ($(stat -c %a "$TMP/fresh/kv" 2>/dev/null))" test "$(stat -c %a "$TMP/fresh/kv" 2>/dev/null)" = 700

# writable by others: refused, and the message says how to fix it
mkdir "$TMP/open" && chmod 777 "$TMP/open"
"${RUN[@]}" --kv-disk "$TMP/open" > /dev/null 2> "$TMP/open.err"
check "a world-writable cache dir is refused" test $? -ne 0
check "the refusal says to chmod 700" grep -q "chmod 700" "$TMP/open.err"
check "nothing was created in it" test -z "$(ls -A "$TMP/open")"

# a directory as a link: refused
ln -s "$D" "$TMP/dlink"
"${RUN[@]}" --kv-disk "$TMP/dlink/" > /dev/null 2> "$TMP/dlink.err"
check "a cache dir that is a symlink is refused" grep -q "is a symbolic link" "$TMP/dlink.err"

# owned by another user (chown needs root)
if [ "$(id -u)" -eq 0 ]; then
  mkdir -m 700 "$TMP/theirs" && chown 65534:65534 "$TMP/theirs"
  "${RUN[@]}" --kv-disk "$TMP/theirs" > /dev/null 2> "$TMP/theirs.err"
  check "a cache dir owned by another user is refused" test $? -ne 0
  check "the refusal names the owner" grep -q "belongs to uid 65534" "$TMP/theirs.err"
else
  echo "note: not root, cannot chown a directory to another user; that case is skipped"
fi

kvt_test_done test_disk_security
