#!/usr/bin/env bash
# kvtier serve with its disk tier on a small tmpfs that fills up and frees
# again: while a filler file takes every byte, requests still succeed with
# the outputs of a node without a disk tier, T2 writes stop with one warning
# (stats and /metrics say out of space) and no stored record is lost; once the
# filler is removed the server finds the space on its own (one "writes
# resumed" line), and the blocks of a new request land in T2 again. Needs to
# mount a tmpfs (root); skips otherwise.
set -u
command -v curl >/dev/null && command -v jq >/dev/null || { echo "SKIP: needs curl and jq"; exit 77; }
. "$(dirname "$0")/../testutil.sh"
MNT=$TMP/fs
mkdir -p "$MNT"
mount -t tmpfs -o size=2m tmpfs "$MNT" 2>/dev/null || { echo "SKIP: cannot mount a tmpfs (not root?)"; exit 77; }
# at exit the servers go first: their open files would keep the tmpfs busy
trap 'for p in "${KVT_PID[@]}"; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; umount "$MNT"; kvt_cleanup' EXIT

"$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 --vocab 800 2>/dev/null
KVT_SERVE_ARGS=(-m "$TMP/m.gguf" --host 127.0.0.1 -t 1)
prompt() { echo "Request number $1 of the full-disk test, with enough words of its own to fill several blocks of the cache: $1 $1 $1 and a few more to be sure."; }
ask() { # ask URL N OUT: a greedy completion of prompt N into OUT
  curl -s -m 60 -H 'Content-Type: application/json' \
    -d "{\"prompt\":\"$(prompt "$2")\",\"max_tokens\":8,\"temperature\":0}" "$1/v1/completions" >"$3"
}
text() { jq -r '.choices[0].text' "$1"; }
t2() { curl -s "${KVT_URL[A]}/v1/cache/stats" | jq -r ".T2.$1"; }
# wait_t2 FIELD OP VALUE: polls A's T2 stats (30 s at most) until FIELD OP VALUE holds
wait_t2() {
  local _i
  for _i in $(seq 600); do [ "$(t2 "$1")" "$2" "$3" ] 2>/dev/null && return 0; sleep 0.05; done
  echo "  T2.$1 = $(t2 "$1"), want $2 $3" >&2; return 1
}
stops() { grep -c "writes disabled until space is free again" "${KVT_LOG[A]}"; }

kvt_start_server C # no disk tier: the reference outputs
kvt_start_server A --kv-disk "$MNT/c" --kv-disk-size 4M --write-through --kv-disk-space-retry 0.2
ask "${KVT_URL[A]}" 0 "$TMP/a0.json"
check "blocks land in T2 before the disk fills" wait_t2 records -gt 0
r0=$(t2 records)

dd if=/dev/zero of="$MNT/filler" bs=64k 2>/dev/null # until the filesystem is full
for i in 1 2 3; do
  ask "${KVT_URL[A]}" "$i" "$TMP/a$i.json"
  ask "${KVT_URL[C]}" "$i" "$TMP/c$i.json"
  check "request $i on a full disk has the output of a node without T2" is "$(text "$TMP/a$i.json")" "$(text "$TMP/c$i.json")"
done
check "T2 writes stop for lack of space" wait_t2 out_of_space = true
check "... with one warning ($(stops))" is "$(stops)" 1
check "no stored record is lost ($(t2 records) of $r0)" ge "$(t2 records)" "$r0"
check "metrics say writes are off for lack of space" \
  grep -q '^kvtier_disk_writes_disabled 2' <(curl -s "${KVT_URL[A]}/metrics")
check "metrics count the pause" grep -q '^kvtier_disk_space_pauses_total 1' <(curl -s "${KVT_URL[A]}/metrics")

rm -f "$MNT/filler"
check "writes resume once space is back" wait_t2 out_of_space = false
check "... logged once" is "$(grep -c "writes resumed" "${KVT_LOG[A]}")" 1
check "... and no second warning" is "$(stops)" 1
r1=$(t2 records)
ask "${KVT_URL[A]}" 4 "$TMP/a4.json"
ask "${KVT_URL[C]}" 4 "$TMP/c4.json"
check "a new request's blocks land in T2 again" wait_t2 records -gt "$r1"
check "... with the output of a node without T2" is "$(text "$TMP/a4.json")" "$(text "$TMP/c4.json")"
check "metrics say writes are on" grep -q '^kvtier_disk_writes_disabled 0' <(curl -s "${KVT_URL[A]}/metrics")

kvt_test_done test_server_disk_full
