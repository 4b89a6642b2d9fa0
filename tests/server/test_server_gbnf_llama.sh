#!/usr/bin/env bash
# llama.cpp's example grammars (tests/reference/gbnf) as the "grammar" field
# on a random-weight model, whose output is noise unless the mask constrains
# it: for each grammar over three seeds (list.gbnf over eight: its negated
# class lets the model's byte tokens split characters anywhere), every output
# ends with "stop", or with "length" only once all of max_tokens is used (the
# mask keeps the shortest completion within reach; where the text may end at
# the last token it offers only end-of-generation, but where it may not, the
# last token completes it and the reply ends with "length"), and parses under
# a checker that shares no code with kvtier's grammars (tests/gbnf_check.py:
# Python's json, regular expressions, small parsers) and holds no U+FFFD (what
# the server writes for bytes that are not valid UTF-8).
# Needs curl, jq and python3.
set -u
command -v curl >/dev/null && command -v jq >/dev/null && command -v python3 >/dev/null ||
  { echo "SKIP: needs curl, jq and python3"; exit 77; }
. "$(dirname "$0")/../testutil.sh"
CHECKER="$KVT_SRC/tests/gbnf_check.py"
# no_fffd FILE WHAT: FILE holds no U+FFFD, else says so for WHAT. The server writes
# each invalid UTF-8 sequence of a reply as U+FFFD, and the mask lets none through.
no_fffd() { ! grep -q $'\xef\xbf\xbd' "$1" || { echo "  $2: U+FFFD in the reply (invalid UTF-8)" >&2; return 1; }; }
GBNF="$KVT_SRC/tests/reference/gbnf"

check "the checkers accept and refuse their sample texts" python3 "$CHECKER" --self-test

"$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 >/dev/null 2>&1 || { echo "mkmodel failed"; exit 1; }
KVT_SERVE_ARGS=(-m "$TMP/m.gguf" -t 1 -c 1024)
kvt_start_server main -np 2

for name in arithmetic c chess english japanese json json_arr list; do
  req=$(jq -n --rawfile g "$GBNF/$name.gbnf" '{prompt: "Go:", grammar: $g, max_tokens: 40}')
  ended=0 parsed=0 seeds="1 2 3"
  [ "$name" = list ] && seeds="1 2 3 4 5 6 7 8"
  n=$(wc -w <<<"$seeds")
  for seed in $seeds; do
    post /v1/completions "$(jq -c --argjson s "$seed" '.seed = $s' <<<"$req")"
    [ "$CODE" = 200 ] || { echo "  $name seed $seed: HTTP $CODE $(cat "$TMP/body")" >&2; continue; }
    case $(jb '.choices[0].finish_reason')/$(jb .usage.completion_tokens) in stop/* | length/40) ended=$((ended + 1)) ;; esac
    jq -j '.choices[0].text' "$TMP/body" >"$TMP/out.txt"
    no_fffd "$TMP/out.txt" "$name seed $seed" && python3 "$CHECKER" "$name" "$TMP/out.txt" && parsed=$((parsed + 1))
  done
  check "$name.gbnf: $n of $n seeds end with stop, or length after all 40 tokens" is "$ended" "$n"
  check "... and $n of $n outputs parse" is "$parsed" "$n"
done

kvt_stop_server main
kvt_test_done test_server_gbnf_llama
