#!/usr/bin/env bash
# Q8_0 numerics against llama.cpp (tests/reference/README.md): rebuilds the two
# mkmodel models the references were made from, checks they are the same bytes,
# then compares `kvtier eval` with llama.cpp through eval_compare.py. The
# tolerances sit above the deviations measured at commit time (F16 twin 0.0104,
# Q8_0 0.18, both 100% top-1), so any real regression in the Q8_0 path fails;
# tightening the Q8_0 one is issue 10's open numerics item.
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
fail=0

# type:sha256:tolerance:min top-1 agreement
for spec in \
  f16:645c76496f21f100990aaed1044f5c476345b02a55d93b7d9ba1f338b18f0a98:2e-2:0.99 \
  q8_0:c9e2e39c5f2b35d21ee2ba7f86efe9f982d0fd6701bf9ab816fce1ba41887a72:0.3:0.99; do
  IFS=: read -r type sha tol top1 <<<"$spec"
  model=$TMP/mk-llama-$type.gguf
  "$BIN" mkmodel -o "$model" --type "$type" --dim 128 --layers 2 --heads 4 --kv-heads 2 --ff 384 --tied \
    --ctx 2048 --seed 42 --vocab-from "$VOCAB" --name "mk-llama-$type" 2>/dev/null ||
    { echo "FAIL: mkmodel $type"; fail=1; continue; }
  got=$(sha256sum "$model" | cut -d' ' -f1)
  if [ "$got" != "$sha" ]; then
    echo "FAIL: mkmodel now writes other bytes for mk-llama-$type ($got); make tests/reference/mk-llama-$type.jsonl again"
    fail=1
    continue
  fi
  python3 "$HERE/eval_compare.py" "$BIN" "$model" "$HERE/reference/mk-llama-$type.jsonl" "$tol" --min-top1 "$top1" ||
    fail=1
done
exit $fail
