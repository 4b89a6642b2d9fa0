# shellcheck shell=bash disable=SC2034 # it sets variables for the test that sources it
# The models and documents of the dense-retrieval tests (cli/test_cli_rag_embed.sh,
# server/test_server_rag_dense.sh), sourced after tests/testutil.sh. The models have random
# weights: their vectors prove the plumbing, not the quality.

# kvt_rag_dense_setup: $TMP/a.gguf and $TMP/b.gguf, two models of one shape but other
# weights (--seed 7), so an index embedded by one is refused for the other; four one-line
# documents in $TMP/docs (lamp.txt, pastry.txt, ice.txt, violin.txt), each on its own subject;
# IDX, where the test builds its index with vectors. Exits 1 if a model cannot be made.
kvt_rag_dense_setup() {
  local shape=(--dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 --ctx 1024)
  "$BIN" mkmodel -o "$TMP/a.gguf" "${shape[@]}" >/dev/null 2>&1 &&
    "$BIN" mkmodel -o "$TMP/b.gguf" "${shape[@]}" --seed 7 >/dev/null 2>&1 || { echo "mkmodel failed"; exit 1; }
  mkdir -p "$TMP/docs"
  echo "The lighthouse keeper climbs one hundred steps every evening to light the lamp." >"$TMP/docs/lamp.txt"
  echo "Bakers fold butter into the dough many times to make flaky pastry." >"$TMP/docs/pastry.txt"
  echo "Glaciers carve wide valleys as they creep downhill over thousands of years." >"$TMP/docs/ice.txt"
  echo "A violin has four strings tuned in fifths and is played with a bow." >"$TMP/docs/violin.txt"
  IDX="$TMP/e.idx"
}
