#!/usr/bin/env bash
# Quantized numerics against llama.cpp (tests/reference/README.md): for every
# model in the table, rebuilds it (with mkmodel, or for a "quantize TYPE [SHAPE]"
# row an F16 mk-llama-f16 model, of SHAPE or else $D128, through `kvtier
# quantize`), checks it is the same bytes the reference was made from (a legacy
# quantize row's sha256 is also the one of llama-quantize's file from the same
# F16 model; the K quantizers are kvtier's own), then compares `kvtier eval`
# with llama.cpp through eval_compare.py. Each tolerance sits above the
# deviation measured at commit time (docs/models.md "Accuracy against llama.cpp"), so a real regression in
# a type's or an architecture's path fails. Where every greedy token matched
# llama.cpp at commit time (the rows below with a 1), the continuation must
# match exactly. mk-llama-f16, mk-llama-q8_0, mk-llama-f16-q8_0, mk-phi3-q8_0,
# mk-gemma2-q8_0, mk-phi3-f16, mk-gemma2-f16 and mk-llama-yarn-f16 match llama.cpp to the printed digit at every
# position (observed max |d| 0 at 507/507, top-1 100%, greedy 48/48 each, since
# the value pass, rope and GELU follow llama.cpp's order): their rows allow
# 1e-3 (5e-3 for mk-llama-q8_0) and require the greedy continuation; so do the
# F16 and Q8_0 rows of the released models' head layouts (heads of 128 and 256
# whose q is not the model's width, GQA ratios 3 and 7, heads of 96), which
# match to the printed digit as well. A row
# named NAME@block runs NAME with KVT_Q8_ORDER=block (ops.h) against
# NAME.amx.jsonl, llama.cpp's output from its AMX path, whose Q8_0 order that
# is; those match to the printed digit too, and allow 1e-3. The other
# quantized rows agree until one activation rounds to a neighbouring int8 value
# in one engine only (their dots sum in kvtier's order), and that step spreads
# through later positions (tests/reference/README.md). The models are made one
# after another and compared as they come in one eval_compare.py process.
#
# Under the sanitizers (KVT_SANITIZED, or an ASan binary) the numbers are the
# release build's (the same code, no fast-math), so what such a run adds is
# memory checking of each path: every model is still rebuilt and its bytes
# checked, but a row whose weight types, architecture and Q8_0 order other
# rows evaluate (SAN_SAME below) is not evaluated again, and says so.
set -u
BIN=${KVT_BIN:?KVT_BIN must point to the kvtier binary}
SHARED=${KVT_SHARED:-../shared}
HERE=${KVT_SRC:?KVT_SRC must point to the source tree}/tests
VOCAB=$SHARED/vocab/ggml-vocab-llama-spm.gguf
[ -f "$VOCAB" ] ||
  { echo "SKIP: $VOCAB is missing (the models need its tokenizer): no model was compared with llama.cpp"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 needed to compare JSON"; exit 77; }
command -v sha256sum >/dev/null || { echo "SKIP: sha256sum needed to check the rebuilt models"; exit 77; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
sanitized=${KVT_SANITIZED:-}
[ -n "$sanitized" ] || ! grep -qa __asan_init "$BIN" || sanitized=1
# ROW=other rows that evaluate the same code: the kvtier-quantized twins of mkmodel's types, Q3_K_M's
# fallback mix (IQ4_NL, Q5_0, Q5_1, Q8_0; Q4_K_M mixes types in one model too), and the
# block order on phi3, gemma2 and the quantized F16 (mk-llama-q8_0@block runs that kernel)
SAN_SAME="mk-llama-f16-q8_0=mk-llama-q8_0 mk-llama-f16-q4_0=mk-llama-q4_0 mk-llama-f16-q4_1=mk-llama-q4_1
mk-llama-f16-q5_0=mk-llama-q5_0 mk-llama-f16-q5_1=mk-llama-q5_1 mk-llama-f16-iq4_nl=mk-llama-iq4_nl
mk-llama-f16-q3_k_m=mk-llama-iq4_nl,q5_0,q5_1,q8_0+mk-llama-q4_k_m mk-llama-f16-q4_k_m=mk-llama-q4_k_m
mk-llama-f16-q8_0@block=mk-llama-q8_0@block mk-phi3-q8_0@block=mk-phi3-q8_0+mk-llama-q8_0@block
mk-gemma2-q8_0@block=mk-gemma2-q8_0+mk-llama-q8_0@block
mk-llama-hd128-q8_0=mk-llama-hd128-f16+mk-llama-q8_0 mk-llama-hd128-q4_k_m=mk-llama-hd128-f16+mk-llama-q4_k_m
mk-gemma2-hd256-q8_0=mk-gemma2-hd256-f16+mk-gemma2-q8_0 mk-llama-gqa3-q8_0=mk-llama-gqa3-f16+mk-llama-q8_0"
[ -z "$sanitized" ] || echo "note: a sanitizer build: $(echo "$SAN_SAME" | wc -w) of the rows are rebuilt and their \
bytes checked, but not evaluated again (other rows evaluate the same code; the release build evaluates all)"

# the small llama shapes: dim 128 (F16, Q8_0, the legacy types) and dim 256
# (rows the K types can hold)
D128="--dim 128 --layers 2 --heads 4 --kv-heads 2 --ff 384 --tied --ctx 2048"
D256="--dim 256 --layers 2 --heads 4 --kv-heads 2 --ff 512 --tied --ctx 2048"
D256M="--dim 256 --layers 4 --heads 4 --kv-heads 2 --ff 512 --ctx 2048"
# phi3 and gemma2 (llama.cpp 4748 runs gemma2 only with 26, 42 or 46 layers)
SMALL="--dim 128 --heads 4 --kv-heads 2 --ff 384"
PHI3="--arch phi3 $SMALL --layers 2 --ctx 512 --swa 64"
GEMMA2="--arch gemma2 $SMALL --layers 26 --ctx 2048 --swa 64"
# released models' head layouts, scaled down: Qwen3-0.6B's heads of 128 (q twice the model's width;
# llama.cpp 4748 has no qwen3, its llama takes the same key_length), Gemma 3 1B's heads of 256 with one
# KV head (on gemma2), SmolLM2's GQA ratio 3 and Qwen2.5-0.5B's ratio 7 with heads of 64, Phi-3's heads of 96
HD128="--dim 256 --layers 2 --heads 4 --kv-heads 2 --head-dim 128 --ff 512 --tied --ctx 2048"
HD256="--arch gemma2 --dim 128 --heads 2 --kv-heads 1 --head-dim 256 --ff 384 --layers 26 --ctx 2048 --swa 64"
GQA3="--dim 192 --layers 2 --heads 3 --kv-heads 1 --ff 512 --tied --ctx 2048"
GQA7="--arch qwen2 --dim 448 --heads 7 --kv-heads 1 --ff 512 --layers 2 --tied --ctx 2048"
HD96="--arch phi3 --dim 384 --heads 4 --kv-heads 4 --ff 512 --layers 2 --ctx 512 --swa 64"
# YaRN rope scaling: 2048 tokens from an original 512, so the third prompt (422 tokens) nears it
YARN="--rope-scaling yarn --rope-factor 4 --rope-orig-ctx 512 --rope-attn-factor 0.9"
mk() { # mk OUT NAME ARGS...
  local out=$1 name=$2; shift 2
  # llama.cpp changes Phi-3's token attributes when the name says phi3, so the model is named mk-phi-*
  # shellcheck disable=SC2068  # ARGS holds several options
  "$BIN" mkmodel -o "$out" $@ --seed 42 --vocab-from "$VOCAB" --name "${name/phi3/phi}" 2>/dev/null
}
# rows < TABLE: rebuilds each row's model and checks its bytes, then writes the row's line for
# eval_compare.py --jobs (which removes the model); 1 if a model could not be made as before.
# Messages go to stderr: stdout is the jobs.
rows() {
  local fail=0 row sha tol top1 greedy args name ref order model qtype shape src got same
  # name | sha256 | tolerance | min top-1 agreement | greedy exact | type and shape, or "quantize TYPE [SHAPE]"
  while IFS='|' read -r row sha tol top1 greedy args; do
    [ -n "$row" ] || continue
    name=${row%@block} ref=$HERE/reference/${row%@block}.jsonl order=lanes
    [ "$row" != "$name" ] && ref=$HERE/reference/$name.amx.jsonl order=block
    model=$TMP/$row.gguf # per row: a row's model may still be read while the next is made
    case $args in
      quantize\ *)
        # shellcheck disable=SC2086  # args holds the type and the shape's options
        set -- ${args#quantize }
        qtype=$1; shift
        shape=${*:-$D128}
        src=$TMP/src-f16-$(printf '%s' "$shape" | sha256sum | cut -c1-12).gguf
        # shellcheck disable=SC2086
        { [ -f "$src" ] || mk "$src" mk-llama-f16 --type f16 $shape; } &&
          "$BIN" quantize "$src" "$model" "$qtype" -t 2 2>/dev/null ||
          { echo "FAIL: $name: $args" >&2; fail=1; continue; } ;;
      *) mk "$model" "$name" $args || { echo "FAIL: mkmodel $name" >&2; fail=1; continue; } ;;
    esac
    got=$(sha256sum "$model" | cut -d' ' -f1)
    if [ "$got" != "$sha" ]; then
      echo "FAIL: $name is now other bytes ($got); make tests/reference/$name.jsonl again" >&2
      fail=1
      continue
    fi
    same=$(echo "$SAN_SAME" | tr ' ' '\n' | awk -F= -v r="$row" '$1 == r { print $2 }')
    if [ -n "$sanitized" ] && [ -n "$same" ]; then
      echo "ok: $row: the same bytes as before; not evaluated in a sanitizer build ($same evaluates that code)" >&2
      rm -f "$model"
      continue
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$model" "$ref" "$tol" "$top1" "$greedy" "$order"
  done
  return $fail
}
rows <<TABLE | python3 "$HERE/eval_compare.py" "$BIN" --jobs -
mk-llama-f16|645c76496f21f100990aaed1044f5c476345b02a55d93b7d9ba1f338b18f0a98|1e-3|0.99|1|--type f16 $D128
mk-llama-q8_0|c9e2e39c5f2b35d21ee2ba7f86efe9f982d0fd6701bf9ab816fce1ba41887a72|5e-3|0.99|1|--type q8_0 $D128
mk-llama-q4_0|710094e8c17e128dd0bf9ee2462be2236a7833a7ebf75dd308275e9b1bd5565a|0.6|0.99|0|--type q4_0 $D128
mk-llama-q4_1|523d9322d4ef773220fcd576854df8040e79c48a11baac52f0dab87d74f8439f|0.5|0.99|0|--type q4_1 $D128
mk-llama-q5_0|6ca6cbe45836e26d56263c69543319380f2dcd22acbd19c7bad803130a5d25ee|0.55|0.99|0|--type q5_0 $D128
mk-llama-q5_1|7fb141aa8b44ff0c08614b507fdf06b936d0be95d50fb9b5d5ce5f6c9ad72a3e|0.35|0.99|0|--type q5_1 $D128
mk-llama-f16-q8_0|4df9ab881678d1fa713e38ffb92660a5098a00618cd5c54964ef96f531b044bc|1e-3|0.99|1|quantize q8_0
mk-llama-f16-q4_0|0494b1fda0c971af1dd1c67c83dc6bb064f640cd5e17e056bc38b409330fc232|0.41|0.99|0|quantize q4_0
mk-llama-f16-q4_1|40b97f26fa933a5a501e6ff533d9af0d578802c9ca5a1feed2469a0424cb5b26|0.46|0.99|0|quantize q4_1
mk-llama-f16-q5_0|e471ab474165d6b974f2dcee79d1b4a8daf8f769bab0a31ce141b197e240a5fb|0.33|0.99|0|quantize q5_0
mk-llama-f16-q5_1|e35ce3d45663a54eb2186a6bc56b519a315a4ca816344055d4bc69d2b514135f|0.31|0.99|0|quantize q5_1
mk-llama-iq4_nl|48a78340c4d7b6f8b181d98cbfb0cb5482448515559bf3f8766283a218b7e568|0.7|0.99|1|--type iq4_nl $D128
mk-llama-f16-iq4_nl|03e3ef69306442cd08bdaaf15e62624b248f4b46e84412ee1dd52221cccd34df|0.55|0.99|1|quantize iq4_nl
mk-llama-f16-q3_k_m|e07a10dc1f0f03751a33a418ee4a923f7daf275a20d5838ac58bc4f3fe79c9ff|0.45|0.99|1|quantize q3_k_m
mk-llama-q2_k|313977b25d7de709c48a35cefeff85796701ea3e5662ff6163c6d2f25e0b8dd7|1.0|0.99|0|--type q2_k $D256
mk-llama-q3_k|ee235fff2d8c7b05b67732a72e4e966f9267d8059433d44d34881155d2512279|0.8|0.99|0|--type q3_k $D256
mk-llama-q4_k|8a496c4f976067facb1ba3d4da15f902ce0b1ea1033816ee81c78c8175694613|0.8|0.99|0|--type q4_k $D256
mk-llama-q5_k|3830f9f3edd4166d784586bff279994d733893541611a3b0014cd191f52121c9|1.0|0.99|0|--type q5_k $D256
mk-llama-q6_k|9a4f7550723c21759a9beddb21cae5f5b5c5bb28ad4698aede096081cd524766|1.0|0.99|0|--type q6_k $D256
mk-llama-iq4_xs|3cdd351b8a4d3ea2b04b67d5905ebe6cbb475f5e9ab53879fa02ab9b55df94a6|0.8|0.99|1|--type iq4_xs $D256
mk-llama-q4_k_m|e5baaa89d54ec8eb1c5ea10dd5b19c5590492ce64cfedb4bab787a0521ff9840|0.15|0.93|0|--type q4_k_m $D256M
mk-llama-f16-q4_k_m|61c2f71aa4052fa16d27cc6f3ec023d822c017f2e714fd0009b246e6d0513480|0.15|0.93|0|quantize q4_k_m $D256M
mk-phi3-f16|9d118f4ac45c6a946dcf810d28c55b2046e6af8fdd651e88290e48a78ee33def|1e-3|0.99|1|--type f16 $PHI3
mk-gemma2-f16|2d69a5f3d8c0f222ae35602537ac3a06248d130249f431465825f0166be33cb9|1e-3|0.99|1|--type f16 $GEMMA2
mk-phi3-q8_0|9336600823f2d3276fc001611426f14889b26156873bead658743e7f4477fd5d|1e-3|0.99|1|--type q8_0 $PHI3
mk-gemma2-q8_0|d188dfdf33f01db43e7238238702eb1991b8311e6a46bac814f7f0f9152b851b|1e-3|0.99|1|--type q8_0 $GEMMA2
mk-llama-yarn-f16|a27d977b1feaad11c507ffb4f6e403b17d245255d69695731f720e50fe396275|1e-3|0.99|1|--type f16 $D128 $YARN
mk-llama-q8_0@block|c9e2e39c5f2b35d21ee2ba7f86efe9f982d0fd6701bf9ab816fce1ba41887a72|1e-3|0.99|1|--type q8_0 $D128
mk-llama-f16-q8_0@block|4df9ab881678d1fa713e38ffb92660a5098a00618cd5c54964ef96f531b044bc|1e-3|0.99|1|quantize q8_0
mk-phi3-q8_0@block|9336600823f2d3276fc001611426f14889b26156873bead658743e7f4477fd5d|1e-3|0.99|1|--type q8_0 $PHI3
mk-gemma2-q8_0@block|d188dfdf33f01db43e7238238702eb1991b8311e6a46bac814f7f0f9152b851b|1e-3|0.99|1|--type q8_0 $GEMMA2
mk-llama-hd128-f16|2665a8a170d66b85ec8b5de84c598ba8b00a017946bd526262b29c00b58a3fde|1e-3|0.99|1|--type f16 $HD128
mk-llama-hd128-q8_0|41a376e755973ac472ee8f9fa1bb6d0da4b153437f3b267b77ed2b4206cacfc6|1e-3|0.99|1|--type q8_0 $HD128
mk-llama-hd128-q4_k_m|500782b8e7637ae71feb5e20fa288306cb9a0aa291940c4f1f2a9d0e514dc256|0.7|0.99|0|--type q4_k_m $HD128
mk-gemma2-hd256-f16|43b90be143144201e7005e12acfbc1bb2b7cfa4ba97479d0e9928d1c4ccb0554|1e-3|0.99|1|--type f16 $HD256
mk-gemma2-hd256-q8_0|2e193d83fb9c1869e861f53f6d5b7f81c6a2fa0d8f89fab1fccb3d34163c0b65|1e-3|0.99|1|--type q8_0 $HD256
mk-llama-gqa3-f16|c82b53289acf259e5023bfc8467ee6211fed4c580592c56c5bb04c45b2635010|1e-3|0.99|1|--type f16 $GQA3
mk-llama-gqa3-q8_0|7607f13f9890fbd81c3e1ab00aa9b0ece1d87bab6663d588cd09ffb4d7814144|1e-3|0.99|1|--type q8_0 $GQA3
mk-qwen2-gqa7-f16|e913591a7b59c68d87c1b24b035fe3d5dc400db0ff3856edba92a10f64a5f727|1e-3|0.99|1|--type f16 $GQA7
mk-phi3-hd96-f16|c9e10e915db571d57b5809c06a493ccf598e38a2d4e306a28f74a25872e847e7|1e-3|0.99|1|--type f16 $HD96
TABLE
st=("${PIPESTATUS[@]}")
[ "${st[0]}" -eq 0 ] && [ "${st[1]}" -eq 0 ]
