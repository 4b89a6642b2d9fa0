#!/usr/bin/env bash
# Which directory --kv-disk may use, tried the way an attacker (or a careless
# user) would: a symlink anywhere on the path ("linkdir/.", "linkdir/../x",
# a link in a middle component, relative or absolute) is refused and nothing
# is written through it; a non-empty directory that kvtier did not make is
# refused by run, cache gc and cache clear, and its files (named like ours:
# lock, header, index, stats) stay byte for byte and mtime for mtime as they
# were; a key file we would refuse is refused before the lock is made; an
# empty directory, one holding only lost+found, and a kvtier cache directory
# (its header damaged too) are used. --log-file refuses a file with another hard link.
set -u
. "$(dirname "$0")/../testutil.sh"

M=$TMP/m.gguf
"$BIN" mkmodel -o "$M" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 --vocab 800 2>/dev/null
for i in 1 2; do echo "a shared system prompt that is long enough to fill blocks: question $i about tiers"; done > "$TMP/prompts.txt"
RUN=("$BIN" run -m "$M" -f "$TMP/prompts.txt" -n 4 --temp 0 --block-size 8 --kv-disk-size 64M --kv-disk-admit-all --write-through)
# snapshot DIR: every entry's name, type, size, mtime (ns) and inode, then the files' checksums
snapshot() { (cd "$1" && stat -c '%n %F %s %.9Y %i' -- $(ls -A) && sha256sum -- $(find . -type f | sort)); }
empty() { [ -z "$(ls -A "$1")" ]; }

# ---- symbolic links on the path ---------------------------------------------------------------
mkdir -m 700 "$TMP/elsewhere" "$TMP/elsewhere/real"
ln -s "$TMP/elsewhere/real" "$TMP/linkdir"
ln -s "$TMP/elsewhere" "$TMP/midlink"

"${RUN[@]}" --kv-disk "$TMP/linkdir/." > /dev/null 2> "$TMP/dot.err"
check "--kv-disk linkdir/. is refused" test $? -ne 0
check "... naming the link" grep -q "linkdir is a symbolic link" "$TMP/dot.err"
check "... and nothing is written through it" empty "$TMP/elsewhere/real"

(cd "$TMP" && "${RUN[@]}" --kv-disk "linkdir/." > /dev/null 2> "$TMP/rdot.err")
check "a relative linkdir/. is refused" test $? -ne 0
check "... naming the link" grep -q "linkdir is a symbolic link" "$TMP/rdot.err"

"${RUN[@]}" --kv-disk "$TMP/linkdir/../kv" > /dev/null 2> "$TMP/dotdot.err"
check "--kv-disk linkdir/../kv is refused" test $? -ne 0
check "... naming the link" grep -q "linkdir is a symbolic link" "$TMP/dotdot.err"
check "... and no directory is made where the link leads" test ! -e "$TMP/elsewhere/kv"

"${RUN[@]}" --kv-disk "$TMP/midlink/real/kv" > /dev/null 2> "$TMP/mid.err"
check "a link in a middle component is refused" test $? -ne 0
check "... naming it" grep -q "midlink is a symbolic link" "$TMP/mid.err"
check "... and nothing is made beyond it" empty "$TMP/elsewhere/real"

for c in stats verify gc clear; do
  expect_rc 1 "$BIN" cache "$c" --kv-disk "$TMP/linkdir/."
  check "cache $c refuses linkdir/." grep -q "linkdir is a symbolic link" "$TMP/out"
done
check "nothing was written through the link by cache commands" empty "$TMP/elsewhere/real"

# ---- a directory kvtier did not make ----------------------------------------------------------
F=$TMP/docs
mkdir -m 700 "$F"
for n in lock header index stats notes.txt; do printf 'the user file %s, not a cache\n' "$n" > "$F/$n"; done
touch -d '2001-02-03 04:05:06.123456789' "$F"/*
snapshot "$F" > "$TMP/docs.before"
"${RUN[@]}" --kv-disk "$F" > /dev/null 2> "$TMP/foreign.err"
check "a non-empty directory without a kvtier header is refused" test $? -ne 0
check "... saying it is no kvtier cache" grep -q "is not empty and is no kvtier cache" "$TMP/foreign.err"
check "... naming some of its files" grep -q "'notes.txt'\|'lock'\|'index'" "$TMP/foreign.err"
expect_rc 1 "$BIN" cache gc --kv-disk "$F" --all-namespaces
check "cache gc refuses it" grep -q "is no kvtier cache" "$TMP/out"
expect_rc 1 "$BIN" cache clear --kv-disk "$F"
check "cache clear refuses it" grep -q "is no kvtier cache" "$TMP/out"
snapshot "$F" > "$TMP/docs.after"
check "its files (lock, header, index, stats) are byte- and mtime-identical, and none was added" \
  cmp -s "$TMP/docs.before" "$TMP/docs.after"

# a file named header that is not ours: refused too, left as it is
G=$TMP/hdr
mkdir -m 700 "$G"
printf 'my header\n' > "$G/header"
snapshot "$G" > "$TMP/hdr.before"
"${RUN[@]}" --kv-disk "$G" > /dev/null 2> "$TMP/hdr.err"
check "a directory whose header is not a kvtier header is refused" test $? -ne 0
check "... saying so" grep -q "'header' is not a kvtier header" "$TMP/hdr.err"
snapshot "$G" > "$TMP/hdr.after"
check "... and nothing in it changed" cmp -s "$TMP/hdr.before" "$TMP/hdr.after"

# ---- directories that are used ----------------------------------------------------------------
E=$TMP/empty
mkdir -m 700 "$E"
"${RUN[@]}" --kv-disk "$E" > /dev/null 2> "$TMP/empty.err"
check "an empty directory is used" test $? -eq 0
check "... and becomes a cache (header, key)" test -f "$E/header" -a -f "$E/key"
"${RUN[@]}" --kv-disk "$E" --restore always > /dev/null 2> "$TMP/again.err"
check "a kvtier cache directory is used again" test $? -eq 0
t2=$(grep -m1 '\[1/2\]' "$TMP/again.err" | sed -n 's/.*T2 \([0-9]*\)).*/\1/p')
check "... and serves from disk (T2 ${t2:-0} tokens)" gt "${t2:-0}" 0
# a kvtier header that is damaged (its namespace line cut short) is still ours: the directory is
# used, the warning says damaged (not "no kvtier cache"), the header is written anew and the
# records still serve from disk
printf 'kvtier-disk-cache\nversion 3\nnames' > "$E/header"
"${RUN[@]}" --kv-disk "$E" --restore always > /dev/null 2> "$TMP/damaged.err"
check "a directory whose kvtier header is damaged is used" test $? -eq 0
check "... saying the header is damaged" grep -q "'header' is a kvtier header but damaged\|/header is a kvtier header but damaged" "$TMP/damaged.err"
check "... and not that it is no kvtier cache" test "$(grep -c 'no kvtier cache' "$TMP/damaged.err")" = 0
t2=$(grep -m1 '\[1/2\]' "$TMP/damaged.err" | sed -n 's/.*T2 \([0-9]*\)).*/\1/p')
check "... its records still serve from disk (T2 ${t2:-0} tokens)" gt "${t2:-0}" 0
check "... and the header is whole again" grep -q '^namespace [0-9a-f]\{32\}$' "$E/header"
# a header of another format version: the message says newer or older
sed -i 's/^version .*/version 999/' "$E/header"
"${RUN[@]}" --kv-disk "$E" > /dev/null 2> "$TMP/newer.err"
check "a header of a newer format is named so" grep -q "written by a newer kvtier (format version 999" "$TMP/newer.err"
(cd "$TMP" && "${RUN[@]}" --kv-disk "./empty/../empty/." > /dev/null 2>&1)
check "a plain path with . and .. (no links) still works" test $? -eq 0

L=$TMP/mnt
mkdir -m 700 "$L" "$L/lost+found"
"${RUN[@]}" --kv-disk "$L" > /dev/null 2>&1
check "a directory holding only lost+found (a file system's root) is used" test -f "$L/header"

"${RUN[@]}" --kv-disk "$TMP/new/deeper/kv" > /dev/null 2>&1
check "a missing directory and its missing parents are made 0700" \
  is "$(stat -c %a "$TMP/new" "$TMP/new/deeper" "$TMP/new/deeper/kv" | tr '\n' ' ')" "700 700 700 "

# ---- the key is checked before anything is written ---------------------------------------------
rm -f "$E/lock"
chmod 644 "$E/key"
snapshot "$E" > "$TMP/key.before"
"${RUN[@]}" --kv-disk "$E" > /dev/null 2> "$TMP/key.err"
check "a key file others can read is refused" grep -q "chmod 600" "$TMP/key.err"
snapshot "$E" > "$TMP/key.after"
check "... before the lock or any other file is written" cmp -s "$TMP/key.before" "$TMP/key.after"
chmod 600 "$E/key"

# ---- --log-file to a file with another hard link ----------------------------------------------
printf 'precious bytes\n' > "$TMP/victim"
snapshot_v() { stat -c '%s %.9Y' "$TMP/victim"; sha256sum < "$TMP/victim"; }
before=$(snapshot_v)
ln "$TMP/victim" "$TMP/hard.log"
timeout 60 "$BIN" serve -m "$M" --port 0 --log-file "$TMP/hard.log" > /dev/null 2> "$TMP/hard.err"
rc=$?
check "--log-file to a hard link is refused (rc $rc)" test "$rc" -ne 0 -a "$rc" -ne 124
check "... saying why" grep -q "hard links" "$TMP/hard.err"
check "... and the other name's file is untouched" is "$(snapshot_v)" "$before"

kvt_test_done test_disk_adopt
