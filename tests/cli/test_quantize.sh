#!/usr/bin/env bash
# kvtier quantize: a progress line per tensor, files that load and run, a
# K-quant mixes with llama.cpp's per-tensor types and fallbacks, a
# lossless round trip (F32 -> F16 gives mkmodel's own F16 model's results),
# the same bytes for any thread count, and clean errors that leave OUT as it
# was: bad type, q2_k_s (needs an importance matrix), same file, bad input, a quantized
# input, a NaN in a weight, a write that runs out of room, OUT a symlink.
set -u
. "${KVT_SRC:?KVT_SRC must point to the source tree}/tests/testutil.sh"
has() { grep -q -- "$1" "$TMP/out" || { echo "  output lacks '$1':" >&2; head -5 "$TMP/out" >&2; return 1; }; }
same_file() { cmp -s "$1" "$2" || { echo "  $1 and $2 differ" >&2; return 1; }; }
no_temp_left() { ! ls "$TMP"/out.gguf.tmp.* >/dev/null 2>&1 || { echo "  a temporary file was left" >&2; return 1; }; }
# eval's JSON without the "model" field (the file name)
eval_of() { "$BIN" eval -m "$1" -t 2 -n 4 "hello quantized world" 2>/dev/null | sed 's/"model":"[^"]*",//'; }
equal_eval() { [ "$(eval_of "$1")" = "$(eval_of "$2")" ] || { echo "  eval differs: $1 vs $2" >&2; return 1; }; }

mk() { # mk TYPE OUT [extra mkmodel flags]
  local t=$1 o=$2; shift 2
  "$BIN" mkmodel -o "$o" --type "$t" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 --vocab 400 --seed 3 "$@" \
    2>/dev/null
}
mk f32 "$TMP/m-f32.gguf" || { echo "FAIL: mkmodel"; exit 1; }
mk f16 "$TMP/m-f16.gguf" && mk q8_0 "$TMP/m-q8.gguf" || { echo "FAIL: mkmodel"; exit 1; }

check "help" expect_rc 0 "$BIN" quantize --help
for w in --threads IN.gguf OUT.gguf q4_0 q5_1 q8_0 bf16 q2_k q4_k_m q5_k_s q6_k output.weight Q6_K "importance matrix" \
  llama-quantize; do
  check "help mentions $w" has "$w"
done
check "listed in kvtier --help" expect_rc 0 "$BIN" --help
check "kvtier --help names quantize" has quantize

# every type: a progress line per tensor (index/count, sizes, time), a file that runs
for t in f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 Q4_0; do
  out=$TMP/m-$t.out.gguf
  check "quantize f32 -> $t" expect_rc 0 "$BIN" quantize "$TMP/m-f32.gguf" "$out" "$t" -t 2
  check "$t: progress line" has "kvtier quantize: \[ 1/"
  check "$t: progress sizes and time" has "MiB .* s$"
  lines=$(grep -c '^kvtier quantize: \[' "$TMP/out")
  count=$(grep -o '^kvtier quantize: \[ *[0-9]*/[0-9]*' "$TMP/out" | tail -1 | sed 's/.*\///')
  check "$t: one progress line per tensor ($lines of $count)" [ "$lines" -eq "$count" -a "$count" -gt 10 ]
  check "$t: final line" has "wrote $out"
  check "$t: eval runs" expect_rc 0 "$BIN" eval -m "$out" -n 2 "hello"
done
check "info on a Q4_1 file" expect_rc 0 "$BIN" info -m "$TMP/m-q4_1.out.gguf"
check "info shows Q4_1 weights" has "Q4_1"
# rows of 64: Q4_1 matrices, the output in Q8_0 (Q6_K needs rows of 256, llama.cpp's fallback)
check "q4_1: the output falls back to Q8_0" has "Q4_1 x 15, Q8_0 x 1"

# the K-quant mixes on rows of 256 (dim 256, ff 512, 2 layers, own output.weight)
mk f32 "$TMP/k-f32.gguf" --dim 256 --ff 512 || { echo "FAIL: mkmodel"; exit 1; }
for t in q2_k q3_k_s q3_k_m q3_k_l q4_k_s q4_k_m q5_k_s q5_k_m q6_k Q4_K iq4_xs; do
  out=$TMP/k-$t.gguf
  check "quantize f32 -> $t" expect_rc 0 "$BIN" quantize "$TMP/k-f32.gguf" "$out" "$t" -t 2
  check "$t: progress line" has "kvtier quantize: \[ 1/"
  check "$t: eval runs" expect_rc 0 "$BIN" eval -m "$out" -n 2 "hello"
done
# llama.cpp's Q4_K_M recipe: attn_v and ffn_down of the last layer and output.weight in Q6_K
check "q4_k_m info" expect_rc 0 "$BIN" info -m "$TMP/k-q4_k_m.gguf"
check "q4_k_m per-tensor types" has "Q4_K x 13, Q6_K x 3"
check "q4_k is q4_k_m" same_file "$TMP/k-q4_k_m.gguf" "$TMP/k-Q4_K.gguf"
check "q6_k info" expect_rc 0 "$BIN" info -m "$TMP/k-q6_k.gguf"
check "q6_k: every matrix Q6_K" has "Q6_K x 16"
check "q2_k info" expect_rc 0 "$BIN" info -m "$TMP/k-q2_k.gguf"
check "q2_k: Q2_K with Q3_K/Q4_K/Q6_K where llama.cpp puts them" has "Q2_K x .*Q3_K x .*Q6_K x 1"
check "iq4_xs info" expect_rc 0 "$BIN" info -m "$TMP/k-iq4_xs.gguf"
check "iq4_xs: every matrix IQ4_XS, the output Q6_K" has "Q6_K x 1, IQ4_XS x 15"
# rows of 64 cannot hold IQ4_XS: IQ4_NL, as llama-quantize's fallback
check "iq4_xs on rows of 64" expect_rc 0 "$BIN" quantize "$TMP/m-f32.gguf" "$TMP/x-fb.gguf" iq4_xs
check "iq4_xs fallback info" expect_rc 0 "$BIN" info -m "$TMP/x-fb.gguf"
check "iq4_xs fallback types" has "Q8_0 x 1, IQ4_NL x 15"
# rows of 64 cannot hold K types: Q4_K falls back to Q5_0, Q6_K to Q8_0 (llama.cpp's rule)
check "q4_k_m on rows of 64" expect_rc 0 "$BIN" quantize "$TMP/m-f32.gguf" "$TMP/k-fb.gguf" q4_k_m
check "fallback info" expect_rc 0 "$BIN" info -m "$TMP/k-fb.gguf"
check "fallback types" has "Q5_0 x 13, Q8_0 x 3"
check "fallback runs" expect_rc 0 "$BIN" eval -m "$TMP/k-fb.gguf" -n 2 "hello"

# lossless round trip: F32 quantized to F16 is mkmodel's F16 model, tensor for tensor
check "f32 -> f16 runs as mkmodel's f16" equal_eval "$TMP/m-f16.out.gguf" "$TMP/m-f16.gguf"
check "f16 -> f16" expect_rc 0 "$BIN" quantize "$TMP/m-f16.gguf" "$TMP/m-f16b.gguf" f16
check "f16 -> f16 runs as its input" equal_eval "$TMP/m-f16b.gguf" "$TMP/m-f16.gguf"
# the thread count does not change the bytes
check "q5_0 with 1 thread" expect_rc 0 "$BIN" quantize "$TMP/m-f32.gguf" "$TMP/t1.gguf" q5_0 --threads 1
check "q5_0 with 3 threads" expect_rc 0 "$BIN" quantize "$TMP/m-f32.gguf" "$TMP/t3.gguf" q5_0 --threads 3
check "same bytes for 1 and 3 threads" same_file "$TMP/t1.gguf" "$TMP/t3.gguf"

# errors: clear, and OUT untouched
echo "precious" >"$TMP/keep"
cp "$TMP/keep" "$TMP/out.gguf"
check "unknown type" expect_rc 2 "$BIN" quantize "$TMP/m-f32.gguf" "$TMP/out.gguf" q3_0
check "unknown type named" has "unknown type 'q3_0'"
check "unknown type lists the supported ones" has "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1"
check "q2_k_s refused" expect_rc 2 "$BIN" quantize "$TMP/m-f32.gguf" "$TMP/out.gguf" Q2_K_S
check "q2_k_s: says why" has "needs an importance matrix"
check "q2_k_s: lists the supported ones" has "supported: f32"
check "same file" expect_rc 2 "$BIN" quantize "$TMP/m-f32.gguf" "$TMP/m-f32.gguf" q4_0
check "same file named" has "same file"
ln "$TMP/m-f32.gguf" "$TMP/hardlink.gguf"
check "same file through a hard link" expect_rc 2 "$BIN" quantize "$TMP/m-f32.gguf" "$TMP/hardlink.gguf" q4_0
check "input intact" expect_rc 0 "$BIN" eval -m "$TMP/m-f32.gguf" -n 1 "hi"
echo "not a model" >"$TMP/bad.gguf"
check "bad input" expect_rc 1 "$BIN" quantize "$TMP/bad.gguf" "$TMP/out.gguf" q4_0
check "bad input named" has "bad.gguf"
check "missing input" expect_rc 1 "$BIN" quantize "$TMP/nope.gguf" "$TMP/out.gguf" q4_0
check "quantized input" expect_rc 2 "$BIN" quantize "$TMP/m-q8.gguf" "$TMP/out.gguf" q4_0
check "quantized input: says why" has "requantizing"
check "missing arguments" expect_rc 2 "$BIN" quantize "$TMP/m-f32.gguf" "$TMP/out.gguf"
check "extra argument" expect_rc 2 "$BIN" quantize "$TMP/m-f32.gguf" "$TMP/out.gguf" q4_0 extra
check "unknown option" expect_rc 2 "$BIN" quantize "$TMP/m-f32.gguf" "$TMP/out.gguf" q4_0 --bogus
check "bad thread count" expect_rc 2 "$BIN" quantize "$TMP/m-f32.gguf" "$TMP/out.gguf" q4_0 -t 0
# a write that runs out of room (a file-size limit stands in for a full disk)
check "out of room" expect_rc 1 bash -c "ulimit -f 64; trap '' XFSZ; exec '$BIN' quantize '$TMP/m-f32.gguf' '$TMP/out.gguf' q8_0"
check "out of room: says why" has "write failed"
check "every failure left OUT as it was" same_file "$TMP/keep" "$TMP/out.gguf"
check "no temporary file left" no_temp_left
# a NaN in a weight (the last 4 bytes of an F32 mkmodel file are the last element of blk.1.ffn_down)
cp "$TMP/m-f32.gguf" "$TMP/nan.gguf"
printf '\x00\x00\xc0\x7f' | dd of="$TMP/nan.gguf" bs=1 seek=$(($(stat -c %s "$TMP/nan.gguf") - 4)) conv=notrunc 2>/dev/null
check "NaN in a weight" expect_rc 1 "$BIN" quantize "$TMP/nan.gguf" "$TMP/out.gguf" q4_0
check "NaN: names the tensor" has "blk.1.ffn_down.weight has a NaN or an infinity"
check "NaN: OUT as it was" same_file "$TMP/keep" "$TMP/out.gguf"
check "NaN: no temporary file left" no_temp_left
# OUT a symlink: replaced by the new file, its target untouched
cp "$TMP/keep" "$TMP/target"
ln -s "$TMP/target" "$TMP/link.gguf"
check "OUT a symlink" expect_rc 0 "$BIN" quantize "$TMP/m-f32.gguf" "$TMP/link.gguf" q4_0
check "the link's target is untouched" same_file "$TMP/keep" "$TMP/target"
check "the link became the model" bash -c "[ ! -L '$TMP/link.gguf' ] && '$BIN' eval -m '$TMP/link.gguf' -n 1 hi >/dev/null 2>&1"

kvt_test_done test_quantize
