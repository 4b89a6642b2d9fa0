#!/usr/bin/env bash
# Cache-aware RAG end to end over loopback with a generated model (docs/rag.md):
# - `kvtier rag index` / `rag query` over a small corpus: the right chunk ranks first;
#   a damaged or truncated index is a clear error for `rag query` and `serve --rag-index`.
# - POST /v1/rag/chat/completions: the same question twice is a full hit on its chunks;
#   another question retrieving the same chunks ranked differently reuses them all
#   (stable order), where score order misses at the first chunk; the planner follows a
#   cached path (a set whose canonical order would miss reuses the cached chunk);
#   greedy output and logprobs with hits equal a cold server's; kvtier.rag reports
#   chunk ids, scores, ranks, cached tokens and tiers (streamed: in the last chunk).
# - Errors: unknown kvtier.rag fields, kvtier.rag elsewhere, kvtier.documents
#   on the RAG route, a bad k or order, no question, no index: 4xx naming the field.
# - POST /v1/cache/prefill and `kvtier rag prewarm --server`: chunks computed without
#   generating, then found cached by the first question; with --flush, from the disk
#   tier after a restart; --questions/--pairs caches a logged question's first two
#   chunks; --cache-dir fills a disk-tier directory with no server, which one then opens.
# Needs curl and jq.
set -u
command -v curl >/dev/null && command -v jq >/dev/null || { echo "SKIP: needs curl and jq"; exit 77; }
. "$(dirname "$0")/../testutil.sh"
has() { case "$1" in *"$2"*) return 0 ;; esac; echo "  '$1' lacks '$2'" >&2; return 1; }

KVT_SERVE_ARGS=(-m "$TMP/tiny.gguf" --host 127.0.0.1 -t 1 -c 1024)
start_server() { kvt_start_server "$@"; } # NAME ARGS...
SYS="Answer from the documents."
ask() { # QUESTION [kvtier.rag JSON]: a greedy RAG request with logprobs
  local rag=${2:-null}
  post /v1/rag/chat/completions "$(jq -cn --arg s "$SYS" --arg q "$1" --argjson r "$rag" \
    '{messages: [{role: "system", content: $s}, {role: "user", content: $q}], max_tokens: 8, temperature: 0,
      logprobs: true, top_logprobs: 3, ignore_eos: true, kvtier: {rag: $r}}')"
}

"$BIN" mkmodel -o "$TMP/tiny.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 --ctx 1024 >/dev/null 2>&1 ||
  { echo "mkmodel failed"; exit 1; }

# ---- the corpus: six documents of two paragraphs ------------------------------------------
mkdir -p "$TMP/docs"
cat >"$TMP/docs/lyon.txt" <<'EOF'
The warehouse in Lyon ships parcels on Mondays and Thursdays only. Trucks leave the loading dock at noon sharp.

Lyon orders placed after Thursday noon wait for the next Monday truck. The warehouse closes on public holidays.
EOF
cat >"$TMP/docs/refunds.txt" <<'EOF'
Refunds go back to the original card within five business days. Gift card refunds become store credit instead.

To request a refund, open the order page and press the return button within thirty days of delivery.
EOF
cat >"$TMP/docs/etna.txt" <<'EOF'
Mount Etna in Sicily erupts several times a year. Its lava flows rarely reach the villages on the lower slopes.

Volcanologists measure sulfur dioxide at the summit craters of Etna to forecast the next eruption.
EOF
cat >"$TMP/docs/bees.txt" <<'EOF'
Honeybees tell their sisters where flowers are with a waggle dance. The angle of the dance points toward the nectar.

A worker bee lives about six weeks in summer. Most of that time she cleans cells, feeds larvae and guards the hive.
EOF
cat >"$TMP/docs/tides.txt" <<'EOF'
Ocean tides rise and fall twice a day because the moon pulls on the water. Spring tides follow the full and new moon.

Neap tides are weaker: they come when the sun and the moon pull at right angles to each other.
EOF
cat >"$TMP/docs/chess.txt" <<'EOF'
In chess, castling moves the king two squares toward a rook, and the rook jumps over the king. Neither piece may have moved before.

A pawn that reaches the last rank is promoted, usually to a queen. Capturing en passant is allowed only right after a two-square pawn move.
EOF
IDX="$TMP/corpus.idx"
"$BIN" rag index -m "$TMP/tiny.gguf" --docs "$TMP/docs" -o "$IDX" --chunk-tokens 160 >"$TMP/index.log" 2>&1
check "rag index succeeds" is "$?" 0
check "rag index reports its chunks" has "$(cat "$TMP/index.log")" "6 documents"
# a JSONL corpus whose id repeats: refused at the line that repeats it, and no index is written
printf '%s\n' '{"id": "a", "text": "one"}' '{"id": "b", "text": "two"}' '{"id": "a", "text": "three"}' >"$TMP/dup.jsonl"
check "rag index: a repeated document id is refused" expect_rc 1 "$BIN" rag index -m "$TMP/tiny.gguf" --docs "$TMP/dup.jsonl" \
  -o "$TMP/dup.idx" --chunk-tokens 160
check "... naming the file, the line and the id" grep -q "dup.jsonl:3: document 'a' is named twice" "$TMP/out"
check "... and writing no index" test ! -e "$TMP/dup.idx"
printf '%s\n' '{"id": "a", "id": "b", "text": "one"}' >"$TMP/dupkey.jsonl"
check "rag index: a key twice in a line is refused" expect_rc 1 "$BIN" rag index -m "$TMP/tiny.gguf" \
  --docs "$TMP/dupkey.jsonl" -o "$TMP/dup.idx" --chunk-tokens 160
check "... naming the line and the key" grep -q "dupkey.jsonl:1: duplicate key 'id'" "$TMP/out"
top() { "$BIN" rag query "$IDX" "$1" -k 3 --json | jq -r '.chunks[0] | "\(.doc)#\(.seq)"'; } # ids are hashes: name by place
check "retrieval: Lyon shipping days" is "$(top 'Which days does the Lyon warehouse ship parcels?')" "lyon.txt#0"
check "retrieval: Lyon late orders" is "$(top 'What happens to Lyon orders placed after Thursday noon?')" "lyon.txt#1"
check "retrieval: bee lifetime" is "$(top 'How long does a worker bee live?')" "bees.txt#1"
check "retrieval: tides" is "$(top 'Why do tides follow the moon?')" "tides.txt#0"
check "retrieval: refunds" is "$(top 'How is a refund paid back to the card?')" "refunds.txt#0"
check "retrieval: castling" is "$(top 'Can the king castle after moving?')" "chess.txt#0"
mkdir -p "$TMP/docs2" && cp "$TMP"/docs/*.txt "$TMP/docs2/" && echo "Aardvarks dig burrows at night." >"$TMP/docs2/aardvark.txt"
"$BIN" rag index -m "$TMP/tiny.gguf" --docs "$TMP/docs2" -o "$TMP/corpus2.idx" --chunk-tokens 160 >/dev/null 2>&1
qc() { "$BIN" rag query "$1" 'Which days does the Lyon warehouse ship? How long does a bee live?' -k 3 --json | jq -c "$2"; }
check "re-indexed with a document added: the same ids" is "$(qc "$TMP/corpus2.idx" '[.chunks[].id]')" "$(qc "$IDX" '[.chunks[].id]')"
check "re-indexed with a document added: renumbered" test "$(qc "$TMP/corpus2.idx" '[.chunks[].chunk]')" != "$(qc "$IDX" '[.chunks[].chunk]')"

# damaged index files: a clear error, never a half-loaded index
cp "$IDX" "$TMP/bad.idx"
printf '\x7f' | dd of="$TMP/bad.idx" bs=1 seek=200 conv=notrunc 2>/dev/null
out=$("$BIN" rag query "$TMP/bad.idx" "Lyon" 2>&1); rc=$?
check "damaged index: rag query fails" is "$rc" 1
check "damaged index: says checksum" has "$out" "checksum mismatch"
head -c 300 "$IDX" >"$TMP/short.idx"
out=$("$BIN" rag query "$TMP/short.idx" "Lyon" 2>&1)
check "truncated index: says so" has "$out" "truncated"
out=$(timeout 60 "$BIN" serve -m "$TMP/tiny.gguf" --port 0 --rag-index "$TMP/bad.idx" 2>&1); rc=$?
check "damaged index: serve refuses to start" is "$rc" 1
check "damaged index: serve names the problem" has "$out" "checksum mismatch"

# ---- the RAG endpoint ------------------------------------------------------------------------
Q1="Which days does the Lyon warehouse ship parcels?"
Q2="What happens to Lyon orders placed after Thursday noon?"
Q3="bees waggle dance Lyon parcels Mondays"
start_server warm --rag-index "$IDX" --rag-k 2
ask "$Q1"
check "rag 200" is "$CODE" 200
check "rag: chunks in canonical order (by id)" is "$(jb '[.kvtier.rag.chunks[].id] | . == sort')" true
check "rag: the two Lyon chunks" is "$(jb '[.kvtier.rag.chunks[] | "\(.doc)#\(.seq)"] | sort | join(",")')" "lyon.txt#0,lyon.txt#1"
check "rag: content-derived ids" is "$(jb '[.kvtier.rag.chunks[].id | test("^lyon\\.txt#[0-9a-f]{8}$")] | all')" true
check "rag: ranks and scores" is "$(jb '[.kvtier.rag.chunks[] | .rank, (.score > 0)] | join(",")')" "0,true,1,true"
check "rag: first request computes its chunks" is "$(jb .kvtier.rag.cached_chunks)" 0
check "rag: chunks are whole blocks" is "$(jb '[.kvtier.rag.chunks[].tokens % 32] | add')" 0
ask "$Q1"
check "same question twice: every chunk cached" is "$(jb .kvtier.rag.cached_chunks)" 2
check "same question twice: cached tokens per chunk = its tokens" \
  is "$(jb '[.kvtier.rag.chunks[] | .cached_tokens == .tokens] | all')" true
check "same question twice: from T0" is "$(jb '[.kvtier.rag.chunks[].tiers.T0] | add')" \
  "$(jb '[.kvtier.rag.chunks[].tokens] | add')"
ask "$Q2"
WARM=$(jq -c '{c: .choices[0].message.content, l: .choices[0].logprobs}' "$TMP/body")
ORDER2=$(jb '[.kvtier.rag.chunks[].id] | join(",")')
check "another question, same chunks ranked otherwise: ranks differ" is "$(jb '[.kvtier.rag.chunks[].rank] | join(",")')" "1,0"
check "another question, same chunks: all reused" is "$(jb .kvtier.rag.cached_chunks)" 2
check "another question: only the question is computed" gt "$(jb '.kvtier.cached_tokens')" 319
ask "$Q2" '{"order": "score"}'
check "score order: best chunk first" is "$(jb '.kvtier.rag.chunks[0] | "\(.doc)#\(.seq)"')" "lyon.txt#1"
check "score order: reuse stops at the moved chunk" is "$(jb '.kvtier.rag.chunks[0].cached_tokens')" 0
check "score order: reported" is "$(jb .kvtier.rag.order)" score
ask "$Q3" '{"order": "canonical"}'
check "canonical order of {bees#0, lyon#0}: bees first, a miss" is \
  "$(jb '[.kvtier.rag.chunks[] | "\(.doc)#\(.seq):\(.cached_tokens)"] | join(",")')" "bees.txt#0:0,lyon.txt#0:0"
start_server warm2 --rag-index "$IDX" --rag-k 2
ask "$Q1"
ask "$Q3"
check "cached order of {bees#0, lyon#0}: follows the cached lyon#0" is \
  "$(jb '[.kvtier.rag.chunks[] | "\(.doc)#\(.seq):\(.cached_tokens)"] | join(",")')" "lyon.txt#0:160,bees.txt#0:0"
check "cached order: reported" is "$(jb .kvtier.rag.order)" cached

# greedy with hits = a cold server over the same planned prompt
start_server cold --rag-index "$IDX" --rag-k 2
ask "$Q2"
check "cold: nothing cached" is "$(jb .kvtier.cached_tokens)" 0
check "cold: the same chunk order" is "$(jb '[.kvtier.rag.chunks[].id] | join(",")')" "$ORDER2"
check "greedy text and logprobs with hits = cold" is "$(jq -c '{c: .choices[0].message.content, l: .choices[0].logprobs}' "$TMP/body")" "$WARM"

# errors name the field
ask "$Q1" '{"k": 2, "bogus": 1}'
check "unknown kvtier.rag field: 400" is "$CODE" 400
check "unknown kvtier.rag field: named" has "$(jb .error.message)" "kvtier.rag.bogus"
ask "$Q1" '{"k": 0}'
check "k 0: 400 on kvtier.rag.k" is "$CODE/$(jb .error.param)" "400/kvtier.rag.k"
ask "$Q1" '{"order": "random"}'
check "bad order: 400 on kvtier.rag.order" is "$CODE/$(jb .error.param)" "400/kvtier.rag.order"
post /v1/rag/chat/completions '{"messages":[{"role":"user","content":"Lyon"}],"kvtier":{"nope":1}}'
check "unknown kvtier field: 400 naming it" is "$CODE/$(jb .error.param)" "400/kvtier"
check "unknown kvtier field: message" has "$(jb .error.message)" "kvtier.nope"
post /v1/chat/completions '{"messages":[{"role":"user","content":"Lyon"}],"kvtier":{"rag":{"k":2}}}'
check "kvtier.rag elsewhere: 400" is "$CODE/$(jb .error.param)" "400/kvtier.rag"
post /v1/rag/chat/completions '{"messages":[{"role":"user","content":"Lyon"}],"kvtier":{"documents":[{"id":"a","text":"b"}]}}'
check "own documents on the RAG route: 400" is "$CODE/$(jb .error.param)" "400/kvtier.documents"
# streamed: the same text, and the last chunk carries kvtier.rag
curl -s -m 120 -N -H 'Content-Type: application/json' "$URL/v1/rag/chat/completions" -d "$(jq -cn --arg s "$SYS" \
  --arg q "$Q2" '{messages: [{role: "system", content: $s}, {role: "user", content: $q}], max_tokens: 8,
  temperature: 0, ignore_eos: true, stream: true}')" >"$TMP/sse"
check "streamed RAG: ends with [DONE]" is "$(tail -n 2 "$TMP/sse" | head -n 1)" "data: [DONE]"
sed -n 's/^data: //p' "$TMP/sse" | grep -v '^\[DONE\]' >"$TMP/events"
check "streamed RAG: the same text as unstreamed" is "$(jq -rj '.choices[0].delta.content // empty' "$TMP/events")" \
  "$(echo "$WARM" | jq -r .c)"
check "streamed RAG: the last chunk reports the chunks, all cached" is \
  "$(jq -sr '[.[] | select(.kvtier)] | last | .kvtier.rag | "\(.cached_chunks) \([.chunks[].id] | join(","))"' "$TMP/events")" \
  "2 $ORDER2"
post /v1/rag/chat/completions '{"messages":[{"role":"user","content":"Lyon"},{"role":"assistant","content":"x"}]}'
check "no question last: 400" is "$CODE/$(jb .error.param)" "400/messages"

# ---- prefill and prewarm -------------------------------------------------------------------------
post /v1/cache/prefill "$(jq -cn --arg s "$SYS" '{messages: [{role: "system", content: $s}, {role: "user", content: ""}],
  kvtier: {documents: [{id: "note", text: "Prefill computes the prompt and stores its blocks without generating."}]}}')"
check "prefill 200" is "$CODE" 200
check "prefill: object" is "$(jb .object)" cache.prefill
check "prefill: whole blocks stored" is "$(jb '.stored_tokens > 0 and .stored_tokens % 32 == 0')" true
check "prefill: computed the prompt" is "$(jb '.computed_tokens + .cached_tokens')" "$(jb .prompt_tokens)"
post /v1/cache/prefill '{"prompt":"x","stream":true}'
check "prefill: stream is 400" is "$CODE/$(jb .error.param)" "400/stream"

start_server nope
post /v1/rag/chat/completions '{"messages":[{"role":"user","content":"Lyon"}]}'
check "no --rag-index: 404" is "$CODE" 404
check "no --rag-index: says how" has "$(jb .error.message)" "--rag-index"

start_server prewarm --rag-index "$IDX" --rag-k 2
out=$("$BIN" rag prewarm --server "$URL" "$IDX" --system "$SYS" 2>&1); rc=$?
check "rag prewarm succeeds" is "$rc" 0
check "rag prewarm covers every chunk" has "$out" "prewarmed $(grep -o 'into [0-9]* chunks' "$TMP/index.log" | grep -o '[0-9]*') chunks"
ask "How long does a worker bee live?"
check "after prewarm: the first chunk is cached" is "$(jb '.kvtier.rag.chunks[0] | .cached_tokens == .tokens')" true
check "after prewarm: from T0" is "$(jb '.kvtier.rag.chunks[0].tiers.T0 == .kvtier.rag.chunks[0].tokens')" true
# prewarm --flush stores the chunks on the disk tier: a restarted server restores them from T2
start_server persist1 --rag-index "$IDX" --rag-k 2 --kv-disk "$TMP/kv" --kv-disk-size 64M
out=$("$BIN" rag prewarm --server "$URL" "$IDX" --system "$SYS" --flush 2>&1)
check "rag prewarm --flush" has "$out" "flushed to the disk tier"
kvt_stop_server persist1
start_server persist2 --rag-index "$IDX" --rag-k 2 --kv-disk "$TMP/kv" --kv-disk-size 64M --restore always
ask "How long does a worker bee live?"
check "after a restart: the first chunk comes from T2" is \
  "$(jb '.kvtier.rag.chunks[0] | (.cached_tokens == .tokens) and (.tiers.T2 == .tokens)')" true
# pair prewarm from a question log: the question's first two chunks (canonical order) are both cached
QP="How long does a worker bee live, and which days does the Lyon warehouse ship?"
printf '%s\n{"question": "%s"}\nWhy do tides follow the moon?\n' "$QP" "$QP" >"$TMP/questions.txt"
start_server pairs --rag-index "$IDX" --rag-k 2
out=$("$BIN" rag prewarm --server "$URL" "$IDX" --system "$SYS" --questions "$TMP/questions.txt" -k 2 --pairs 1 2>&1)
check "rag prewarm --pairs: one pair of three questions" has "$out" "3 questions, the 1 most common opening pairs"
check "rag prewarm --pairs: reported" has "$out" "chunks and 1 pairs"
ask "$QP"
check "after pair prewarm: both chunks cached" is "$(jb '.kvtier.rag.cached_chunks')" 2
# prewarm with no server, into a disk-tier directory that a server then opens
out=$("$BIN" rag prewarm --cache-dir "$TMP/kvlocal" -m "$TMP/tiny.gguf" -t 1 "$IDX" --system "$SYS" \
  --questions "$TMP/questions.txt" -k 2 --pairs 1 2>&1); rc=$?
check "rag prewarm --cache-dir succeeds" is "$rc" 0
check "rag prewarm --cache-dir: on disk" has "$out" "in the disk tier"
check "rag prewarm --cache-dir: progress" has "$out" "rag prewarm: "
start_server local --rag-index "$IDX" --rag-k 2 --kv-disk "$TMP/kvlocal" --restore always
ask "$QP"
check "after prewarm --cache-dir: both chunks from T2" is \
  "$(jb '[.kvtier.rag.chunks[] | (.cached_tokens == .tokens) and (.tiers.T2 == .tokens)] | all')" true
check "rag prewarm: --cache-dir without -m is an error" is \
  "$("$BIN" rag prewarm --cache-dir "$TMP/kvx" "$IDX" >/dev/null 2>&1; echo $?)" 2
mkdir -p "$TMP/theirs" && echo notes >"$TMP/theirs/notes.txt"
out=$("$BIN" rag prewarm --cache-dir "$TMP/theirs" -m "$TMP/tiny.gguf" -t 1 "$IDX" --system "$SYS" 2>&1); rc=$?
check "rag prewarm: a --cache-dir that is no cache fails cleanly (exit 1, not a crash)" is "$rc" 1
check "... saying why" has "$out" "is not empty and is no kvtier cache"
printf 'Why do tides follow the moon?\n\n%s\n' "$QP" >"$TMP/q_blank.txt"
out=$("$BIN" rag prewarm --server "$URL" "$IDX" --system "$SYS" --questions "$TMP/q_blank.txt" -k 2 --pairs 1 2>&1)
check "rag prewarm --questions: a blank line does not end the file" has "$out" "2 questions"
printf 'Why do tides follow the moon?\n{"q": "typo"}\n' >"$TMP/q_bad.txt"
out=$("$BIN" rag prewarm --server "$URL" "$IDX" --system "$SYS" --questions "$TMP/q_bad.txt" -k 2 --pairs 1 2>&1); rc=$?
check "rag prewarm --questions: a JSON line without a question is an error naming the line" is \
  "$rc/$(echo "$out" | grep -c 'q_bad.txt:2: this JSON line has no string "question"')" "1/1"
check "rag prewarm: --pairs without --questions is an error" is \
  "$("$BIN" rag prewarm --server "$URL" "$IDX" --pairs 3 >/dev/null 2>&1; echo $?)" 2
out=$("$BIN" rag prewarm --server "http://127.0.0.1:1" "$IDX" 2>&1); rc=$?
check "rag prewarm: no server is an error" is "$rc/$(echo "$out" | grep -c 'cannot connect')" "1/1"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
