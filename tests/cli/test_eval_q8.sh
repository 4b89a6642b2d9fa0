#!/usr/bin/env bash
# kvtier against llama.cpp on mkmodel models (tests/reference/README.md): for
# each row of the table below, rebuilds the model the reference was made from,
# checks it is the same bytes, then compares `kvtier eval` with llama.cpp
# through eval_compare.py. Each tolerance sits above the deviation measured at
# commit time (the README's table), so a real regression fails:
#   llama F16 twin 0.0104 and Q8_0 0.18 (both 100% top-1; tightening Q8_0 is
#   issue 10's numerics item); phi3 F16 0.0020 and gemma2 F16 0.0035, both
#   100% top-1 with all 16 greedy tokens equal, so their continuations must
#   match exactly; their Q8_0 twins 0.037 (99.3% top-1 on a prompt) and 0.073
#   (90% on the 10-token prompt, where the final soft-cap leaves near-ties),
#   the Q8_0 gap of issue 10's numerics item, so their bounds are loose.
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

SMALL="--dim 128 --heads 4 --kv-heads 2 --ff 384 --seed 42"
# name | sha256 of the model | logit tolerance | min top-1 agreement | greedy exact | mkmodel arguments
TABLE="
mk-llama-f16|645c76496f21f100990aaed1044f5c476345b02a55d93b7d9ba1f338b18f0a98|2e-2|0.99|0|--type f16 $SMALL --layers 2 --tied --ctx 2048
mk-llama-q8_0|c9e2e39c5f2b35d21ee2ba7f86efe9f982d0fd6701bf9ab816fce1ba41887a72|0.3|0.99|0|--type q8_0 $SMALL --layers 2 --tied --ctx 2048
mk-phi3-f16|9d118f4ac45c6a946dcf810d28c55b2046e6af8fdd651e88290e48a78ee33def|1e-2|0.99|1|--arch phi3 --type f16 $SMALL --layers 2 --ctx 512 --swa 64
mk-gemma2-f16|2d69a5f3d8c0f222ae35602537ac3a06248d130249f431465825f0166be33cb9|1e-2|0.99|1|--arch gemma2 --type f16 $SMALL --layers 26 --ctx 2048 --swa 64
mk-phi3-q8_0|9336600823f2d3276fc001611426f14889b26156873bead658743e7f4477fd5d|0.1|0.95|0|--arch phi3 --type q8_0 $SMALL --layers 2 --ctx 512 --swa 64
mk-gemma2-q8_0|d188dfdf33f01db43e7238238702eb1991b8311e6a46bac814f7f0f9152b851b|0.15|0.85|0|--arch gemma2 --type q8_0 $SMALL --layers 26 --ctx 2048 --swa 64
"
while IFS='|' read -r name sha tol top1 greedy args; do
  [ -n "$name" ] || continue
  model=$TMP/$name.gguf
  # shellcheck disable=SC2086 # args is a list of options
  "$BIN" mkmodel -o "$model" $args --vocab-from "$VOCAB" --name "${name/phi3/phi}" 2>/dev/null ||
    { echo "FAIL: mkmodel $name"; fail=1; continue; }
  got=$(sha256sum "$model" | cut -d' ' -f1)
  if [ "$got" != "$sha" ]; then
    echo "FAIL: mkmodel now writes other bytes for $name ($got); make tests/reference/$name.jsonl again"
    fail=1
    continue
  fi
  exact=()
  [ "$greedy" = 1 ] && exact=(--greedy-exact)
  python3 "$HERE/eval_compare.py" "$BIN" "$model" "$HERE/reference/$name.jsonl" "$tol" --min-top1 "$top1" "${exact[@]}" ||
    fail=1
done <<<"$TABLE"
exit $fail
