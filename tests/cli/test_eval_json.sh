#!/usr/bin/env bash
# `kvtier eval` prints valid JSON whatever the model computes: a model whose
# logits are NaN or infinite (output_norm poisoned in a copy of a mkmodel
# file) gives a line that parses, with null for each non-finite logit, and
# the ids still listed. `info --json` parses too. A GGUF whose rope.freq_base
# is denormal, NaN or negative, or whose rms epsilon is NaN, is refused with
# an error naming the key and the range.
set -u
command -v python3 >/dev/null || { echo "SKIP: python3 needed to parse JSON and edit GGUF files"; exit 77; }
. "$(dirname "$0")/../testutil.sh"
POKE=${KVT_SRC:?KVT_SRC must point to the source tree}/tests/gguf_poke.py
PARSE='import json, sys; json.load(sys.stdin)'

"$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 --vocab 800 2>/dev/null
check "a finite model's eval line parses" python3 -c "$PARSE" < <("$BIN" eval -m "$TMP/m.gguf" -n 4 "hello world")
check "info --json parses" python3 -c "$PARSE" < <("$BIN" info --json -m "$TMP/m.gguf")

for v in nan inf -inf; do
  python3 "$POKE" "$TMP/m.gguf" "$TMP/bad.gguf" tensor output_norm.weight "$v"
  "$BIN" eval -m "$TMP/bad.gguf" -n 4 "hello world" >"$TMP/eval.json" 2>"$TMP/eval.err"
  check "eval of a model with $v logits succeeds" is "$?" 0
  check "... and its line parses as JSON" python3 -c "$PARSE" <"$TMP/eval.json"
  check "... with no bare nan or inf" test "$(grep -ciE '(^|[^a-z])-?(nan|inf)' "$TMP/eval.json")" = 0
  n=$(python3 -c 'import json, sys
d = json.load(sys.stdin)
print(sum(1 for pos in d["prompt_logits_top5"] for tok, v in pos if v is None and isinstance(tok, int)))' <"$TMP/eval.json")
  check "... with null logits beside token ids ($n)" gt "$n" 0
done

# hyper-parameters outside their ranges are refused, naming the key and the range
for kv in "llama.rope.freq_base 1.4e-45" "llama.rope.freq_base nan" "llama.rope.freq_base -1" \
  "llama.rope.freq_base 1e30" "llama.attention.layer_norm_rms_epsilon nan" \
  "llama.attention.layer_norm_rms_epsilon 0"; do
  read -r key val <<<"$kv"
  python3 "$POKE" "$TMP/m.gguf" "$TMP/bad.gguf" f32 "$key" "$val"
  check "$key = $val is refused" expect_rc 1 "$BIN" eval -m "$TMP/bad.gguf" "hello"
  check "... naming the key" grep -q "'$key' = .* is out of range: expected a finite number from" "$TMP/out"
done
check "mkmodel refuses a denormal --rope-base" expect_rc 2 "$BIN" mkmodel -o "$TMP/x.gguf" --rope-base 1.4e-45
check "... naming the flag and the range" grep -q -- "--rope-base must be 0 or from 1 to" "$TMP/out"
python3 "$POKE" "$TMP/m.gguf" "$TMP/ok.gguf" f32 llama.rope.freq_base 500000
check "an ordinary rope.freq_base loads" expect_rc 0 "$BIN" eval -m "$TMP/ok.gguf" -n 1 "hello"

kvt_test_done test_eval_json
