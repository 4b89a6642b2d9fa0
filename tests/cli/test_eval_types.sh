#!/usr/bin/env bash
# Every weight type against llama.cpp (tests/reference/README.md): for each row
# of tests/reference/mk-models.tsv, rebuilds the model the reference was made
# from (kvtier mkmodel, or mkmodel F16 then kvtier quantize), checks it is the
# same bytes (sha256; for quantize rows also llama-quantize's bytes), then
# compares `kvtier eval` with llama.cpp's output through eval_compare.py at the
# row's tolerance and top-1 agreement. A new type is one more row there.
set -u
BIN=${KVT_BIN:?KVT_BIN must point to the kvtier binary}
SHARED=${KVT_SHARED:-../shared}
HERE=${KVT_SRC:?KVT_SRC must point to the source tree}/tests
VOCAB=$SHARED/vocab/ggml-vocab-llama-spm.gguf
[ -f "$VOCAB" ] || { echo "SKIP: $VOCAB is missing (the models need its tokenizer)"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 needed to compare JSON"; exit 77; }
command -v sha256sum >/dev/null || { echo "SKIP: sha256sum needed to check the rebuilt models"; exit 77; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail=0 rows=0

# mkmodel_f TYPE NAME OUT: the model the references were made from
mkmodel_f() {
  "$BIN" mkmodel -o "$3" --type "$1" --dim 128 --layers 2 --heads 4 --kv-heads 2 --ff 384 --tied \
    --ctx 2048 --seed 42 --vocab-from "$VOCAB" --name "$2" 2>/dev/null
}

while IFS=$'\t' read -r name recipe sha tol top1; do
  case $name in ''|'#'*) continue ;; esac
  rows=$((rows + 1))
  model=$TMP/$name.gguf type=${recipe#*:}
  case $recipe in
    mkmodel:*) mkmodel_f "$type" "$name" "$model" || { echo "FAIL: mkmodel $type"; fail=1; continue; } ;;
    quantize:*)
      { [ -f "$TMP/src-f16.gguf" ] || mkmodel_f f16 mk-llama-f16 "$TMP/src-f16.gguf"; } &&
        "$BIN" quantize "$TMP/src-f16.gguf" "$model" "$type" -t 2 2>/dev/null ||
        { echo "FAIL: quantize $type"; fail=1; continue; } ;;
    *) echo "FAIL: $name: unknown recipe $recipe"; fail=1; continue ;;
  esac
  got=$(sha256sum "$model" | cut -d' ' -f1)
  if [ "$got" != "$sha" ]; then
    echo "FAIL: $recipe now writes other bytes for $name ($got); make tests/reference/$name.jsonl again"
    fail=1
    continue
  fi
  python3 "$HERE/eval_compare.py" "$BIN" "$model" "$HERE/reference/$name.jsonl" "$tol" --min-top1 "$top1" ||
    fail=1
done <"$HERE/reference/mk-models.tsv"
[ "$rows" -ge 11 ] || { echo "FAIL: only $rows rows in mk-models.tsv"; fail=1; }
exit $fail
