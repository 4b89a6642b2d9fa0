# shellcheck shell=bash disable=SC2034 # it sets variables for the script that sources it
# The RAG benchmark set shared by bench/rag.sh and bench/rag_blend.sh: the model (SMALL=1: a
# dim-256, 4-layer llama; else the ~250M one; MODEL= overrides), the knobs THREADS, TOPICS,
# BLOCKS, WORDS, and rag_corpus OUT, which writes the corpus (BLOCKS chunks of ~WORDS words)
# to OUT/docs and its index to OUT/corpus.idx. Source it from the repository root.
# MODEL must have the llama SPM vocabulary (as the default does): with another tokenizer the
# documents are not ~300 tokens (bench/out/llama250m-q8_0.gguf from bench/speed.sh has a generated
# byte-level BPE vocabulary: ~820 tokens each, split into 3 chunks, so a topic no longer retrieves
# its 3 documents). For Q8_0 weights, quantize the SPM model: kvtier quantize IN OUT q8_0.
if [ "${SMALL:-0}" = 1 ]; then
  MODEL=${MODEL:-bench/out/llama-small-spm-f16.gguf}
  SHAPE=(--dim 256 --layers 4 --heads 4 --kv-heads 2 --ff 512)
else
  MODEL=${MODEL:-bench/out/llama250m-spm-f16.gguf}
  SHAPE=(--dim 1024 --layers 16 --heads 16 --kv-heads 4 --ff 2816)
fi
T=${THREADS:-2}
TOPICS=${TOPICS:-20}
BLOCKS=${BLOCKS:-40}
WORDS=${WORDS:-240}

rag_corpus() { # rag_corpus OUT: the model (made once), the corpus and its index
  local out=$1
  mkdir -p "$out"
  rm -rf "$out/docs"
  if [ ! -f "$MODEL" ]; then
    local vocab=../shared/vocab/ggml-vocab-llama-spm.gguf extra=()
    [ -f "$vocab" ] && extra=(--vocab-from "$vocab")
    ./build/kvtier mkmodel -o "$MODEL" "${SHAPE[@]}" --vocab 32000 --type f16 --ctx 16384 "${extra[@]}"
  fi
  python3 bench/rag_bench.py corpus --docs "$out/docs" --blocks "$BLOCKS" --words "$WORDS"
  ./build/kvtier rag index -m "$MODEL" --docs "$out/docs" -o "$out/corpus.idx" --chunk-tokens 384
}
