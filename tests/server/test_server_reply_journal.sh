#!/usr/bin/env bash
# kvtier serve keeps its reply map in T2's directory (side-replies), so a
# conversation continues after a restart with its replies spliced as the ids
# they were generated with, on a random-weight model whose replies often
# re-tokenize otherwise:
# - a reply whose re-tokenization differs from its generated ids is found
#   (/apply-template of the next turn here against a --retokenize-replies
#   server); after kill -9 (the reply written, not fsync'd) and after SIGTERM,
#   the next turn's prompt is the same ids, its cached tokens cover the
#   history through that reply from T2, and its greedy reply and logprobs
#   equal those of the server before the restart;
# - a torn tail, a flipped byte and a record whose CRC holds but whose MAC
#   does not (its MAC field altered) in the journal: the server starts, warns
#   naming the file and the offset, keeps the records before it and never
#   splices damaged ones; `cache verify` reports the journal's records, and
#   exits 1 naming it and the first bad offset when one is bad; a symbolic link in place of the journal is not
#   followed (its target is never written) and is replaced by a file; a
#   journal that cannot be written is said once and the server serves;
# - a restart with another model over the same directory does not splice
#   the old ids (an info line says why), nor does a server whose directory
#   has another key (the journal copied there); --retokenize-replies writes
#   nothing;
# - with --kv-disk-no-mac the journal is unsigned (CRCs only) and a SIGTERM
#   restart keeps the replies' ids as with a MAC; cache verify passes it in a
#   directory without a key file; in one with a key file verify fails it and
#   a server (MAC on) does not replay it.
# Needs curl and jq.
set -u
command -v curl >/dev/null && command -v jq >/dev/null || { echo "SKIP: needs curl and jq"; exit 77; }
. "$(dirname "$0")/../testutil.sh"
"$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 --ctx 2048 >/dev/null 2>&1 ||
  { echo "mkmodel failed"; exit 1; }
"$BIN" mkmodel -o "$TMP/m2.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 --ctx 2048 --seed 7 \
  >/dev/null 2>&1 || { echo "mkmodel failed"; exit 1; }
KVT_SERVE_ARGS=(-m "$TMP/m.gguf" --host 127.0.0.1 -t 1 --ctx 2048 --parallel 1)
DISK=(--kv-disk "$TMP/kv" --kv-disk-size 64M --restore always)
J=$TMP/kv/side-replies
B=32 # tokens per block (serve's default)

turn1() { printf '{"messages":[{"role":"user","content":"Question %s: what comes next?"}]' "$1"; }
turn2() { # K REPLY_JSON_STRING [EXTRA]: turn 1, its reply and one more user message
  printf '%s,{"role":"assistant","content":%s},{"role":"user","content":"And then?"}]%s}' \
    "$(turn1 "$1" | sed 's/]$//')" "$2" "${3:-}"
}
GEN=',"max_tokens":24,"temperature":0,"logprobs":true,"top_logprobs":2'
chat() { post /v1/chat/completions "$1"; cp "$TMP/body" "$2"; } # BODY OUT
toks() { post /apply-template "$1"; jb -c .tokens; }              # BODY: the prompt's ids
# what must be equal before and after a restart: the reply, its logprobs, the prompt's length
answer() { jq -c '[.choices[0].message.content, .choices[0].logprobs, .usage.prompt_tokens]' "$1" | cksum; }
size() { stat -c %s "$J" 2>/dev/null || echo 0; }
bigger() { [ "$(size)" -gt "$1" ]; }
verify() { rc=0; "$BIN" cache verify --kv-disk "$1" >"$TMP/verify" 2>&1 || rc=$?; } # DIR: its output and $rc

# ---- a reply that re-tokenizes differently -------------------------------------------------
kvt_start_server ref --retokenize-replies
kvt_start_server a "${DISK[@]}"
check "the journal is made at start" test -f "$J"
check "... 0600" is "$(stat -c %a "$J")" 600
K='' LIM=0
for k in $(seq 1 40); do
  URL=${KVT_URL[a]}
  before=$(size)
  chat "$(turn1 "$k")$GEN}" "$TMP/t1.json"
  wait_for bigger "$before" || break
  R=$(jq -c '.choices[0].message.content' "$TMP/t1.json")
  spliced=$(toks "$(turn2 "$k" "$R")")
  URL=${KVT_URL[ref]}
  plain=$(toks "$(turn2 "$k" "$R")")
  # where the two first differ, and the full blocks of turn 1's prompt and reply
  d=$(jq -n --argjson a "$spliced" --argjson b "$plain" \
    '[range([$a, $b] | map(length) | min) | select($a[.] != $b[.])] | first // ([$a, $b] | map(length) | min)')
  lim=$(jq '(.usage.prompt_tokens + .usage.completion_tokens) / '$B' | floor * '$B "$TMP/t1.json")
  if [ "$d" -lt "$lim" ]; then K=$k LIM=$lim SPLICED=$spliced; break; fi
done
echo "note: turn 1 of conversation $K: generated and re-tokenized ids first differ at token ${d:-?} of $LIM"
check "a reply whose re-tokenization differs within its full blocks (turn $K, at token ${d:-?} < $LIM)" test -n "$K"
[ -n "$K" ] || { kvt_test_done test_server_reply_journal; exit 1; }
URL=${KVT_URL[a]}
T2BODY=$(turn2 "$K" "$R" "$GEN")
chat "$T2BODY" "$TMP/ref.json" # the server that never restarted
REF=$(answer "$TMP/ref.json")
post /v1/cache/flush ''
check "flush 200" is "$CODE" 200

# ---- kill -9, then SIGTERM: the next turn is the same prompt, cached from T2, the same answer
restarted() { # WHAT: turn 2 on the restarted server a
  check "$1: the prompt is the spliced ids" is "$(toks "$T2BODY")" "$SPLICED"
  chat "$T2BODY" "$TMP/t2.json"
  check "$1: cached tokens cover the history through the reply" \
    ge "$(jq .usage.prompt_tokens_details.cached_tokens "$TMP/t2.json")" "$LIM"
  check "$1: ... from T2" ge "$(jq .kvtier.cached_tokens_by_tier.T2 "$TMP/t2.json")" "$LIM"
  check "$1: the greedy reply and logprobs of the server before" is "$(answer "$TMP/t2.json")" "$REF"
}
kvt_stop_server a KILL
kvt_start_server a "${DISK[@]}"
check "kill -9: the journal is replayed" grep -q "replies replayed" "$TMP/a.log"
restarted "kill -9"
kvt_stop_server a
check "graceful stop exits 0" test $? -eq 0
kvt_start_server a "${DISK[@]}"
restarted "SIGTERM"
kvt_stop_server a

# ---- cache verify counts the records --------------------------------------------------------
verify "$TMP/kv"
check "cache verify on a good journal exits 0" is "$rc" 0
NREC=$(sed -n 's/^reply journal side-replies: \([0-9]*\) records, \1 good$/\1/p' "$TMP/verify")
check "... and reports its records, all good" gt "${NREC:-0}" 0

# ---- damage: a torn tail, a flipped byte, a MAC that does not verify, a link -----------------
cp "$J" "$TMP/good"
truncate -s $(($(size) - 5)) "$J"
kvt_start_server a "${DISK[@]}"
check "a torn tail: one warning naming the file and offset" \
  is "$(grep -c "reply journal $J: damaged record at offset [0-9]* (a record cut short)" "$TMP/a.log")" 1
check "... keeping the records before it, as many as verify counted less the torn one" \
  grep -q "replay stops there, $((NREC - 1)) replies kept" "$TMP/a.log"
restarted "a torn tail" # the records before it still splice
kvt_stop_server a
kvt_start_server a "${DISK[@]}"
check "the damage was rewritten away" is "$(grep -c "damaged record" "$TMP/a.log")" 0
kvt_stop_server a
cp "$TMP/good" "$J"
printf '\x01' | dd of="$J" bs=1 seek=50 count=1 conv=notrunc status=none # inside the first record
verify "$TMP/kv"
check "cache verify on a damaged journal exits 1" is "$rc" 1
check "... naming it and the first bad offset" grep -q \
  "^reply journal side-replies: $NREC records, $((NREC - 1)) good, the first bad one at offset 40 (a bad checksum)" \
  "$TMP/verify"
kvt_start_server a "${DISK[@]}"
check "a flipped byte: one warning naming the file and offset 40" \
  is "$(grep -c "reply journal $J: damaged record at offset 40 (a bad checksum)" "$TMP/a.log")" 1
check "... nothing of it is spliced" is "$(toks "$T2BODY")" "$plain"
chat "$T2BODY" "$TMP/t2.json"
check "... and the server answers" is "$(jq -r '.choices[0].finish_reason != null' "$TMP/t2.json")" true
kvt_stop_server a
# the first record's MAC field (after its 8-byte head and its body) altered: its CRC still holds
cp "$TMP/good" "$J"
body=$(od -An -tu4 -j40 -N4 "$J" | tr -d ' ')
printf '\x5a' | dd of="$J" bs=1 seek=$((40 + 8 + body + 3)) count=1 conv=notrunc status=none
verify "$TMP/kv"
check "cache verify on a record whose MAC fails exits 1" is "$rc" 1
check "... naming the MAC" grep -q "the first bad one at offset 40 (a MAC that does not verify" "$TMP/verify"
kvt_start_server a "${DISK[@]}"
check "a MAC that does not verify: one warning naming the file and offset 40" \
  is "$(grep -c "reply journal $J: damaged record at offset 40 (a MAC that does not verify" "$TMP/a.log")" 1
check "... nothing of it is spliced" is "$(toks "$T2BODY")" "$plain"
kvt_stop_server a
printf 'precious\n' >"$TMP/target"
rm -f "$J"
ln -s "$TMP/target" "$J"
kvt_start_server a "${DISK[@]}"
check "a link: a warning that it is not followed" grep -q "side-replies is a symbolic link: not followed" "$TMP/a.log"
chat "$(turn1 1)$GEN}" "$TMP/t1.json"
check "... the server answers" is "$(jq -r '.choices[0].finish_reason != null' "$TMP/t1.json")" true
kvt_stop_server a
check "... its target is never written" is "$(cat "$TMP/target")" precious
check "... the journal is a file again" test -f "$J" -a ! -L "$J"

# ---- a journal that cannot be written: said once, the server serves ----------------------------
mkdir -p "$J.tmp/x" # the temporary name taken by a directory: the rewrite at start fails
kvt_start_server a "${DISK[@]}"
check "a failed write: one warning" is "$(grep -c "no longer kept across a restart" "$TMP/a.log")" 1
chat "$(turn1 1)$GEN}" "$TMP/t1.json"
check "... the server answers" is "$(jq -r '.choices[0].finish_reason != null' "$TMP/t1.json")" true
kvt_stop_server a
rm -rf "$J.tmp"

# ---- another model over the same directory ---------------------------------------------------
cp "$TMP/good" "$J"
kvt_start_server m2 "${DISK[@]}" -m "$TMP/m2.gguf"
check "another model: an info line says the journal is not used" grep -q "was written for another model" "$TMP/m2.log"
check "... the old ids are not spliced" test "$(toks "$T2BODY")" != "$SPLICED"
kvt_stop_server m2
kvt_start_server a "${DISK[@]}"
check "... and the first model's journal is gone with it" test "$(toks "$T2BODY")" != "$SPLICED"
kvt_stop_server a

# ---- a journal copied into another directory (another key); no key at all -----------------------
kvt_start_server b --kv-disk "$TMP/kv3" --kv-disk-size 64M --restore always
kvt_stop_server b
cp "$TMP/good" "$TMP/kv3/side-replies"
verify "$TMP/kv3"
check "cache verify on a journal copied from another directory exits 1" is "$rc" 1
check "... saying it is signed under another key" grep -q "^reply journal side-replies: .*another directory's key" \
  "$TMP/verify"
kvt_start_server b --kv-disk "$TMP/kv3" --kv-disk-size 64M --restore always
check "another directory's key: an info line says the journal is not replayed" \
  grep -q "reply journal $TMP/kv3/side-replies: signed under another directory's key.*not replayed" "$TMP/b.log"
check "... the old ids are not spliced" test "$(toks "$T2BODY")" != "$SPLICED"
kvt_stop_server b

# ---- --kv-disk-no-mac: an unsigned journal, replayed on its CRCs --------------------------------
NOMAC=(--kv-disk "$TMP/kv4" --kv-disk-size 64M --restore always --kv-disk-no-mac)
kvt_start_server a "${NOMAC[@]}"
chat "$(turn1 "$K")$GEN}" "$TMP/t1.json"
check "--kv-disk-no-mac: turn 1 gives the same reply" is "$(jq -c '.choices[0].message.content' "$TMP/t1.json")" "$R"
check "... spliced as its generated ids" is "$(toks "$T2BODY")" "$SPLICED"
chat "$T2BODY" "$TMP/ref.json"
REF=$(answer "$TMP/ref.json")
post /v1/cache/flush ''
kvt_stop_server a
check "... a journal is written" test -f "$TMP/kv4/side-replies"
kvt_start_server a "${NOMAC[@]}"
check "... and replayed on its CRCs" grep -q "replies replayed (on their CRCs: --kv-disk-no-mac)" "$TMP/a.log"
restarted "--kv-disk-no-mac, SIGTERM"
kvt_stop_server a
verify "$TMP/kv4"
check "cache verify on an unsigned journal without a key file exits 0" is "$rc" 0
check "... and reports its records, all good, without a MAC" grep -q \
  "^reply journal side-replies: \([0-9]*\) records, \1 good, without a MAC (written under --kv-disk-no-mac)$" \
  "$TMP/verify"
# the unsigned journal in a directory with a key: verify fails it, a server with MAC on does not replay it
cp "$TMP/kv4/side-replies" "$J"
verify "$TMP/kv"
check "cache verify on an unsigned journal beside a key file exits 1" is "$rc" 1
check "... saying it has no MAC though the directory has a key file" \
  grep -q "^reply journal side-replies: .*no MAC though the directory has a key file.*: not valid$" "$TMP/verify"
kvt_start_server a "${DISK[@]}"
check "MAC on over an unsigned journal: an info line says it is not replayed" \
  grep -q "reply journal $J: written under --kv-disk-no-mac.*not replayed" "$TMP/a.log"
check "... its ids are not spliced" is "$(toks "$T2BODY")" "$plain"
kvt_stop_server a
verify "$TMP/kv"
check "... and it is replaced: cache verify exits 0" is "$rc" 0

# ---- --retokenize-replies writes nothing ------------------------------------------------------
kvt_start_server rt --retokenize-replies --kv-disk "$TMP/kv2" --kv-disk-size 64M
chat "$(turn1 1)$GEN}" "$TMP/t1.json"
kvt_stop_server rt
check "--retokenize-replies: no journal" test ! -e "$TMP/kv2/side-replies"

kvt_test_done test_server_reply_journal
