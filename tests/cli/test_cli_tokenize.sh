#!/bin/bash
# `kvtier tokenize`: ids on one line, --pieces, -f, and exit codes 0 / 1 / 2; the vocab-only
# files it takes are refused by the commands that run a model, with a message saying what they are.
set -u
BIN=${KVT_BIN:-./kvtier}
SHARED=${KVT_SHARED:-../shared}
SPM=$SHARED/vocab/ggml-vocab-llama-spm.gguf
GPT2=$SHARED/vocab/ggml-vocab-gpt-2.gguf
[ -f "$SPM" ] && [ -f "$GPT2" ] || { echo "SKIP: $SPM or $GPT2 is missing: kvtier tokenize was not checked"; exit 77; }
fail=0
expect() { # expect NAME WANT GOT
    if [ "$2" != "$3" ]; then echo "FAIL $1: want [$2] got [$3]"; fail=1; else echo "ok $1"; fi
}
expect "spm bos" "1 15043 3186" "$("$BIN" tokenize -m "$SPM" "Hello world")"
expect "spm no-bos" "15043 3186" "$("$BIN" tokenize -m "$SPM" --no-bos "Hello world")"
expect "gpt2 plain" "18435 995" "$("$BIN" tokenize -m "$GPT2" " Hello world")"
expect "gpt2 special" "50256 5303" "$("$BIN" tokenize -m "$GPT2" --special "<|endoftext|>hi")"
tmp=$(mktemp)
printf 'a\nb' > "$tmp"
expect "file" "64 198 65" "$("$BIN" tokenize -m "$GPT2" -f "$tmp")"
expect "pieces" "$(printf "64 198 65\n64 'a'\n198 '\\\\x0a'\n65 'b'")" "$("$BIN" tokenize -m "$GPT2" -f "$tmp" --pieces)"
rm -f "$tmp"
"$BIN" tokenize --help | grep -q -- "--pieces" || { echo "FAIL help"; fail=1; }
"$BIN" tokenize "x" 2>/dev/null; expect "no model exit" 2 $?
"$BIN" tokenize -m "$GPT2" --bogus x 2>/dev/null; expect "bad option exit" 2 $?
"$BIN" tokenize -m /nonexistent.gguf x 2>/dev/null; expect "missing model exit" 1 $?
"$BIN" tokenize -m "$GPT2" -f /nonexistent.txt 2>/dev/null; expect "missing file exit" 1 $?
# a vocab-only GGUF given to a command that runs a model: exit 1, saying what the file is
err=$(mktemp)
for cmd in "run -p hi" "serve --port 0" "eval hi"; do
    timeout 60 "$BIN" $cmd -m "$GPT2" -t 1 >/dev/null 2>"$err"
    expect "vocab-only to $cmd: exit" 1 $?
    grep -q "ggml-vocab-gpt-2.gguf: holds a tokenizer only (no tensors): a vocab-only GGUF cannot be run; use it with \`kvtier tokenize\`" "$err" ||
        { echo "FAIL vocab-only to $cmd: the message is '$(tail -n 1 "$err")'"; fail=1; }
done
rm -f "$err"
exit $fail
