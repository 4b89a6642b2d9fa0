#!/usr/bin/env bash
# `kvtier eval` at the smallest contexts it makes (prompt + -n tokens), on GQA
# models: a heap overflow found here before (the attention scratch was sized by n_ctx
# while G * head_dim f16 values were staged in it) made every such run abort or
# fail under ASan. Each run must exit 0, and a prompt's logits must not depend
# on the context size: every -n gives the same prompt_logits_top5, and each
# greedy continuation extends the shorter ones.
set -u
BIN=${KVT_BIN:?KVT_BIN must point to the kvtier binary}
SHARED=${KVT_SHARED:-../shared}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail=0

# the overflow's first reproduction, tiny-llama-f16, when the shared model is there
models=() skipped=''
if [ -f "$SHARED/models/tiny-llama-f16.gguf" ]; then
  models+=("$SHARED/models/tiny-llama-f16.gguf")
else
  skipped="$SHARED/models/tiny-llama-f16.gguf is missing: the overflow's first reproduction did not run"
  echo "note: skipped: $skipped"
fi
# our own GQA shapes: G * head_dim well above any context used here
"$BIN" mkmodel -o "$TMP/g3.gguf" --dim 192 --layers 1 --heads 6 --kv-heads 2 --ff 64 --vocab 300 >/dev/null ||
  { echo "FAIL: mkmodel 6/2"; exit 1; }
"$BIN" mkmodel -o "$TMP/g8.gguf" --arch qwen2 --dim 256 --layers 1 --heads 8 --kv-heads 1 --ff 64 --vocab 300 \
  --type f32 >/dev/null || { echo "FAIL: mkmodel 8/1"; exit 1; }
models+=("$TMP/g3.gguf" "$TMP/g8.gguf")

field() { # field NAME FILE: the raw JSON value of NAME (eval prints one line, fields in a fixed order)
  sed -e "s/.*\"$1\":\(\[[^\"]*\]\).*/\1/" "$2"
}

for m in "${models[@]}"; do
  for t in 1 3; do
    for n in 0 1 4; do
      out=$TMP/eval-$t-$n.json
      if ! "$BIN" eval -m "$m" -t "$t" -n "$n" "hello there" >"$out" 2>"$TMP/err"; then
        echo "FAIL: eval -m $(basename "$m") -t $t -n $n exited nonzero:"; head -5 "$TMP/err"; fail=1; continue
      fi
      grep -q '"greedy":\[' "$out" || { echo "FAIL: eval -n $n printed no greedy field"; fail=1; }
    done
    ref=$TMP/eval-$t-4.json
    [ -s "$ref" ] || continue
    for n in 0 1; do
      got=$TMP/eval-$t-$n.json
      [ -s "$got" ] || continue
      [ "$(field prompt_logits_top5 "$got")" = "$(field prompt_logits_top5 "$ref")" ] ||
        { echo "FAIL: $(basename "$m") -t $t: prompt logits at -n $n differ from -n 4"; fail=1; }
      g=$(field greedy "$got" | tr -d '[]') r=$(field greedy "$ref" | tr -d '[]')
      case "$r" in "$g"*) ;; *) echo "FAIL: $(basename "$m") -t $t: greedy -n $n [$g] is not a prefix of [$r]"; fail=1 ;; esac
    done
  done
  # a context of exactly one token: a single token id, nothing generated
  "$BIN" eval -m "$m" -n 0 --tokens "1" >"$TMP/one.json" 2>"$TMP/err" ||
    { echo "FAIL: eval of one token at context 1 on $(basename "$m")"; head -5 "$TMP/err"; fail=1; }
done
[ $fail -eq 0 ] && echo "ok: eval at small contexts on ${#models[@]} GQA models"
[ $fail -eq 0 ] && [ -n "$skipped" ] && { echo "SKIP: test_eval_ctx: $skipped"; exit 77; }
exit $fail
