# shellcheck shell=bash
# make_prompt N FILE: one line of text that MODEL's tokenizer (through the kvtier binary KVT)
# makes N tokens of (BOS included, within 1%), and FILE.ids with its ids (for llama-server's
# /completion). Shared by bench/long_context.sh and bench/gpu_vs_llama.sh; source it after
# setting KVT and MODEL. Returns 1, saying why on stderr, when 5 tries do not get there.
make_prompt() {
  local n=$1 f=$2 words=$(($1 / 2)) got=0
  for _ in 1 2 3 4 5; do
    seq 1 "$words" | awk 'BEGIN { split("the river carries old stones past quiet towns and green fields", w, " ") }
      { printf "%s%s", (NR > 1 ? " " : ""), w[$1 % 11 + 1] } END { print "" }' >"$f"
    "$KVT" tokenize -m "$MODEL" -f "$f" >"$f.ids"
    got=$(wc -w <"$f.ids")
    [ $((got > n ? got - n : n - got)) -le $((n / 100)) ] && return 0
    words=$((words * n / got))
  done
  echo "make_prompt: could not make a $n-token prompt (got $got)" >&2
  return 1
}
