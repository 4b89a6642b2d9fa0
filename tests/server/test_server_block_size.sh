#!/usr/bin/env bash
# kvtier serve --block-size B: servers with blocks of 16, 48 and 64 tokens give the default
# server's greedy text, report B (/props, /v1/cache/stats, the start-up line), and a repeated
# request reuses every full block, up to all but its last token (cached = min(floor(prompt / B) * B,
# prompt - 1)), with the cold text. A RAG index cut for other blocks makes serve warn naming the
# --block-size that matches it.
# T2 records are namespaced by block size: a restart with another --block-size over the same
# --kv-disk directory serves none of them (a miss, said in the log) and still gives the cold
# text, and a restart with the first block size again restores them. The same for T3: a node
# with other blocks on the same Redis reads nothing its neighbour wrote. A value outside
# 1..1024 is a usage error naming --block-size.
set -u
command -v curl >/dev/null && command -v jq >/dev/null || { echo "SKIP: needs curl and jq"; exit 77; }
. "$(dirname "$0")/../testutil.sh"

"$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 --vocab 800 2>/dev/null
KVT_SERVE_ARGS=(-m "$TMP/m.gguf" --host 127.0.0.1 -t 1)
PROMPT="A long and fixed system prompt that every request of this service starts with: you are a careful assistant that answers questions about the tiered key-value cache, its memory tier and its disk tier, and why the output stays the same whatever size its blocks are."
BODY="{\"prompt\":\"$PROMPT\",\"max_tokens\":12,\"temperature\":0}"
# ask NAME OUT: the greedy completion of PROMPT from server NAME into OUT
ask() { curl -s -m 60 -H 'Content-Type: application/json' -d "$BODY" "${KVT_URL[$1]}/v1/completions" >"$2"; }
text() { jq -r '.choices[0].text' "$1"; }
tier() { jq -r ".kvtier.cached_tokens_by_tier.$2" "$1"; }
# reused N B: what a repeat of an N-token prompt reuses with blocks of B (every full block, the last
# one's last token computed again when N is a multiple of B)
reused() { echo $(($1 / $2 * $2 < $1 - 1 ? $1 / $2 * $2 : $1 - 1)); }

# usage errors, before any model is read
for v in 0 1025; do
  check "serve --block-size $v is refused" expect_rc 2 "$BIN" serve -m "$TMP/none.gguf" --block-size "$v"
  check "... naming the flag and its range" grep -qF -- "--block-size must be an integer in [1, 1024], got '$v'" \
    "$TMP/out"
done
check "\$KVTIER_BLOCK_SIZE is read and named" expect_rc 2 env KVTIER_BLOCK_SIZE=x "$BIN" serve -m "$TMP/none.gguf"
check "... as the variable" grep -qF -- "\$KVTIER_BLOCK_SIZE must be an integer" "$TMP/out"
check "serve --help explains --block-size" sh -c "'$BIN' serve --help | grep -qF -- '--block-size B'"

kvt_start_server D
ask D "$TMP/cold.json"
check "the default server answers" test -n "$(text "$TMP/cold.json")"
n=$(jq -r '.usage.prompt_tokens' "$TMP/cold.json")
for B in 16 48 64; do
  kvt_start_server "B$B" --block-size "$B"
  check "B=$B: the start-up line names the block" grep -qF "pages of $B tokens" "${KVT_LOG[B$B]}"
  check "... /props reports it" is "$(curl -s "${KVT_URL[B$B]}/props" | jq -r .block_size)" "$B"
  check "... and /v1/cache/stats" is "$(curl -s "${KVT_URL[B$B]}/v1/cache/stats" | jq -r .block_tokens)" "$B"
  ask "B$B" "$TMP/b$B-1.json"
  ask "B$B" "$TMP/b$B-2.json"
  check "... the cold request computes everything" is "$(jq -r .usage.prompt_tokens_details.cached_tokens "$TMP/b$B-1.json")" 0
  check "... with the default server's text" is "$(text "$TMP/b$B-1.json")" "$(text "$TMP/cold.json")"
  check "... the repeat reuses every full block of its $n tokens" \
    is "$(jq -r .usage.prompt_tokens_details.cached_tokens "$TMP/b$B-2.json")" "$(reused "$n" "$B")"
  check "... with the cold text" is "$(text "$TMP/b$B-2.json")" "$(text "$TMP/cold.json")"
  kvt_stop_server "B$B"
done
kvt_stop_server D

# a RAG index cut for blocks of 16: a default server warns naming the flag that matches it, and
# one started with that block size does not warn
printf 'The Lyon warehouse ships on Mondays.\n\nThe Paris office opens at nine.\n' >"$TMP/doc.txt"
"$BIN" rag index -m "$TMP/m.gguf" --docs "$TMP/doc.txt" -o "$TMP/idx" --block-size 16 --chunk-tokens 64 \
  >/dev/null 2>&1 || bad "rag index"
kvt_start_server RAG --rag-index "$TMP/idx"
check "a 32-token server over a 16-token RAG index says which --block-size matches" \
  grep -qF "cut for blocks of 16 tokens, the cache uses 32" "${KVT_LOG[RAG]}"
check "... naming the flag" grep -qF "give serve --block-size 16" "${KVT_LOG[RAG]}"
kvt_stop_server RAG
kvt_start_server RAG16 --rag-index "$TMP/idx" --block-size 16
check "with --block-size 16 it does not warn" sh -c "! grep -qF 'cut for blocks' '${KVT_LOG[RAG16]}'"
kvt_stop_server RAG16

# T2: one directory, three starts: blocks of 32, then 16 (the first start's records are another
# namespace: misses), then 32 again (restored)
DISK=(--kv-disk "$TMP/kv" --kv-disk-size 64M --restore always)
kvt_start_server T32 "${DISK[@]}"
ask T32 "$TMP/t32.json"
check "a 32-token server over a disk directory stops cleanly" kvt_stop_server T32
kvt_start_server T16 "${DISK[@]}" --block-size 16
check "a 16-token server over the same directory says its records are another namespace" \
  grep -qF "records of other namespaces (another model, KV type, block size or numerics) are misses" "${KVT_LOG[T16]}"
ask T16 "$TMP/t16.json"
check "... reads none of them" is "$(tier "$TMP/t16.json" T2)" 0
check "... computes the whole prompt" is "$(jq -r .usage.prompt_tokens_details.cached_tokens "$TMP/t16.json")" 0
check "... and gives the cold text" is "$(text "$TMP/t16.json")" "$(text "$TMP/cold.json")"
check "the 16-token server stops cleanly" kvt_stop_server T16
kvt_start_server T32 "${DISK[@]}"
ask T32 "$TMP/t32b.json"
check "back at 32 tokens, the first start's records are restored" is "$(tier "$TMP/t32b.json" T2)" "$(reused "$n" 32)"
check "... with the cold text" is "$(text "$TMP/t32b.json")" "$(text "$TMP/cold.json")"
kvt_stop_server T32

# T3: a node with blocks of 16 on the Redis a 32-token node wrote through to reads none of it
if command -v redis-server >/dev/null; then
  head -c 32 /dev/urandom >"$TMP/key" && chmod 600 "$TMP/key"
  kvt_start_redis
  REMOTE=(--kv-remote "redis://127.0.0.1:$RPORT" --kv-remote-key-file "$TMP/key" --kv-remote-timeout-ms 10000
    --restore always)
  kvt_start_server R32 "${REMOTE[@]}" --write-through
  ask R32 "$TMP/r32.json"
  curl -s -m 60 -X POST -d '' "${KVT_URL[R32]}/v1/cache/flush" >/dev/null
  check "the 32-token node wrote its blocks to Redis" \
    ge "$(redis-cli -p "$RPORT" --scan --pattern 'kvt:*' | wc -l)" $(((n - 1) / 32))
  kvt_start_server R16 "${REMOTE[@]}" --block-size 16
  ask R16 "$TMP/r16.json"
  check "a 16-token node on the same Redis reads none of them" is "$(tier "$TMP/r16.json" T3)" 0
  check "... and gives the cold text" is "$(text "$TMP/r16.json")" "$(text "$TMP/cold.json")"
  kvt_start_server R32b "${REMOTE[@]}"
  ask R32b "$TMP/r32b.json"
  check "a second 32-token node reads them" gt "$(tier "$TMP/r32b.json" T3)" 0
  check "... with the cold text" is "$(text "$TMP/r32b.json")" "$(text "$TMP/cold.json")"
  kvt_stop_server R32
  kvt_stop_server R16
  kvt_stop_server R32b
else
  kvt_test_skip_part "redis-server is not installed: the T3 part did not run"
fi

kvt_test_done test_server_block_size
