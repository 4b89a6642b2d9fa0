#!/usr/bin/env bash
# `kvtier eval --block-size B` prints the very line of the default block size, byte for byte
# (every logit and the greedy continuation), for B = 1, 7, 16, 48 and 256: on the CPU engine the
# attention's numerics do not depend on how keys are split into pages, so the block size changes
# no bit. A value outside 1..4096 is a usage error naming --block-size.
set -u
. "${KVT_SRC:?KVT_SRC must point to the source tree}/tests/testutil.sh"

"$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 --vocab 800 2>/dev/null
TEXT="the tiered cache keeps blocks of tokens in memory, on disk and in a shared store, and a block size changes \
how many tokens each page holds but never what the model computes from them"
"$BIN" eval -m "$TMP/m.gguf" -n 8 "$TEXT" >"$TMP/default.json" 2>"$TMP/err"
check "eval with the default block size runs" is "$?" 0
n=$(grep -o '"prompt_tokens":\[[0-9,]*' "$TMP/default.json" | tr -cd , | wc -c)
check "... over a prompt of several blocks ($((n + 1)) tokens)" gt "$n" 64
for B in 1 7 16 48 256; do
  "$BIN" eval -m "$TMP/m.gguf" -n 8 --block-size "$B" "$TEXT" >"$TMP/b$B.json" 2>"$TMP/err"
  check "eval --block-size $B runs" is "$?" 0
  check "... and prints the default's line byte for byte" cmp -s "$TMP/default.json" "$TMP/b$B.json"
done
for v in 0 4097 x; do
  check "eval --block-size $v is refused" expect_rc 2 "$BIN" eval -m "$TMP/m.gguf" --block-size "$v" hi
  check "... naming the flag and its range" grep -qF -- "--block-size expects an integer in [1, 4096], got '$v'" "$TMP/out"
done
check "eval --help explains --block-size" sh -c "'$BIN' eval --help | grep -qF -- '--block-size B'"

kvt_test_done test_eval_block
