#!/usr/bin/env bash
# The disk tier through the CLI, across real processes: a restart serves the
# prefix from disk with identical greedy output; kill -9 during writes never
# leads to wrong output; a second process on the directory gets a clear error;
# a full disk leaves inference running from RAM with one warning.
set -u
. "$(dirname "$0")/../testutil.sh"
trap '[ -n "${MNT:-}" ] && umount "$MNT" 2>/dev/null; kvt_cleanup' EXIT # the full-disk check mounts a tmpfs

M=$TMP/m.gguf
"$BIN" mkmodel -o "$M" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 --vocab 800 2>/dev/null
for i in 1 2 3 4 5 6; do
  echo "the fixed system prompt of this service says: answer briefly and well. question number $i: what is a tier?"
done > "$TMP/prompts.txt"
RUN=("$BIN" run -m "$M" -f "$TMP/prompts.txt" -n 12 --temp 0 --block-size 8 --kv-disk-size 64M)

"${RUN[@]}" --no-cache > "$TMP/cold.out" 2>/dev/null
"${RUN[@]}" --kv-disk "$TMP/d" > "$TMP/run1.out" 2> "$TMP/run1.err"
check "first run with a disk cache equals a cold run" cmp -s "$TMP/cold.out" "$TMP/run1.out"
"${RUN[@]}" --kv-disk "$TMP/d" --restore always > "$TMP/run2.out" 2> "$TMP/run2.err"
check "restarted run equals a cold run" cmp -s "$TMP/cold.out" "$TMP/run2.out"
t2=$(grep -m1 '\[1/6\]' "$TMP/run2.err" | sed -n 's/.*T2 \([0-9]*\)).*/\1/p')
check "the first prompt after a restart comes from disk (T2 $t2 tokens)" test "${t2:-0}" -gt 0
check "cache verify finds every record intact" "$BIN" cache verify --kv-disk "$TMP/d"
"$BIN" cache stats --kv-disk "$TMP/d" > "$TMP/stats.txt" 2>&1
check "cache stats reports a disk hit rate over 2 sessions" grep -q "lifetime (2 sessions): [1-9][0-9]* of [0-9]* prompt blocks" "$TMP/stats.txt"

# a segment cut to a few bytes: the tier opens with one warning line naming it, the run recomputes what was
# lost (output equal to a cold run), and cache verify names the file and fails
seg=$(ls "$TMP"/d/seg-*.kvt | head -1)
truncate -s 5 "$seg"
"${RUN[@]}" --kv-disk "$TMP/d" --restore always > "$TMP/cut.out" 2> "$TMP/cut.err"
check "a run on a directory with a segment cut to 5 bytes succeeds" test $? -eq 0
check "... with output equal to a cold run" cmp -s "$TMP/cold.out" "$TMP/cut.out"
n=$(grep -c "warn: .*damaged stretches.*$(basename "$seg")" "$TMP/cut.err")
check "... and one warning naming the segment ($n)" test "$n" -eq 1
"$BIN" cache verify --kv-disk "$TMP/d" > "$TMP/cut_verify.out" 2>&1
check "cache verify fails on the cut segment" test $? -eq 1
check "... naming it and what is wrong" grep -q "damaged: $(basename "$seg") at byte 0 (5 bytes): .*too few" "$TMP/cut_verify.out"

# a second process on the same directory is refused with a clear message
"$BIN" run -m "$M" -p "hold the lock" -n 100000 --ignore-eos --temp 0 --kv-disk "$TMP/d" --ctx 100000 > /dev/null 2>&1 &
holder=$!
# wait (up to 10 s) until the holder has opened the cache: its pid is in the lock file
for _ in $(seq 1 100); do
  [ "$(tr -dc 0-9 < "$TMP/d/lock" 2>/dev/null)" = "$holder" ] && break
  sleep 0.1
done
"${RUN[@]}" --kv-disk "$TMP/d" > /dev/null 2> "$TMP/lock.err"
rc=$?
kill -TERM $holder 2>/dev/null; wait $holder 2>/dev/null
check "second process fails" test $rc -ne 0
check "second process is told the directory is in use" grep -q "in use" "$TMP/lock.err"

# kill -9 while writing, repeatedly: every later run still equals the cold run
for k in 1 2 3 4 5 6 7 8; do
  "${RUN[@]}" --kv-disk "$TMP/k" --write-through --kv-disk-admit-all > /dev/null 2>&1 &
  pid=$!
  sleep "0.0$((RANDOM % 9 + 1))"
  kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
done
"${RUN[@]}" --kv-disk "$TMP/k" --restore always > "$TMP/after_kill.out" 2> "$TMP/after_kill.err"
check "after kill -9 loops the output equals a cold run" cmp -s "$TMP/cold.out" "$TMP/after_kill.out"

# kill -9 during heavy demotion (a tiny T0 and T1, so every prompt pushes blocks down to disk), once the
# directory holds written records: the tier opens cleanly afterwards and serves output equal to a cold run
for i in $(seq 1 60); do echo "demotion prompt $i: $((i * 7919 % 1000)) words of its own $((i * 104729 % 977)) to fill pages"; done \
  > "$TMP/demote.txt"
DEM=("$BIN" run -m "$M" -f "$TMP/demote.txt" -n 12 --temp 0 --block-size 8 --kv-active 40K --kv-ram 20K)
"${DEM[@]}" --no-cache > "$TMP/demote_cold.out" 2>/dev/null
"${DEM[@]}" --kv-disk "$TMP/dm" --kv-disk-size 64M > /dev/null 2>&1 &
pid=$!
written=0
for _ in $(seq 1 400); do
  written=$(cat "$TMP"/dm/seg-*.kvt 2>/dev/null | wc -c)
  [ "$written" -ge 65536 ] && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.01
done
kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
check "records were on disk when the demoting run was killed ($written bytes)" test "$written" -ge 65536
"${DEM[@]}" --kv-disk "$TMP/dm" --kv-disk-size 64M --restore always > "$TMP/demote_after.out" 2> "$TMP/demote_after.err"
check "after kill -9 during demotion the disk tier opens and the run succeeds" test $? -eq 0
check "... with output equal to a cold run" cmp -s "$TMP/demote_cold.out" "$TMP/demote_after.out"
t2=$(sed -n 's/.*T2 \([0-9]*\)).*/\1/p' "$TMP/demote_after.err" | awk '{s += $1} END {print s + 0}')
check "... restoring blocks the killed run had written ($t2 tokens from T2)" test "$t2" -gt 0

# a full disk: a 256 KiB tmpfs (needs root; skipped otherwise)
MNT=$TMP/full
mkdir -p "$MNT"
for i in $(seq 1 40); do echo "prompt $i with its own words: $RANDOM $RANDOM $RANDOM $RANDOM $RANDOM $RANDOM"; done > "$TMP/many.txt"
FULL=("$BIN" run -m "$M" -f "$TMP/many.txt" -n 12 --temp 0 --block-size 8)
"${FULL[@]}" --no-cache > "$TMP/many_cold.out" 2>/dev/null
if mount -t tmpfs -o size=64k tmpfs "$MNT" 2>/dev/null; then
  "${FULL[@]}" --kv-disk "$MNT/c" --kv-disk-size 4M --kv-disk-admit-all --write-through > "$TMP/full.out" 2> "$TMP/full.err"
  check "full disk: run succeeds" test $? -eq 0
  check "full disk: output equals a cold run" cmp -s "$TMP/many_cold.out" "$TMP/full.out"
  n=$(grep -ac "kvtier: warn: " "$TMP/full.err")
  check "full disk: exactly one warning ($n)" test "$n" -eq 1
  umount "$MNT"; MNT=
else
  echo "note: cannot mount a tmpfs here (not root?); full-disk case skipped"
fi

kvt_test_done test_disk_restart
