#!/usr/bin/env bash
# kvtier serve end to end over loopback with a tiny generated model: the
# OpenAI endpoints (plain and streaming), cache reporting and reuse (repeat
# requests, chat turns through the reply map), tenant isolation (keys,
# cache_salt), limits and malformed input, slow and vanishing clients,
# concurrent clients, metrics, graceful shutdown. Needs curl and jq.
set -u
command -v curl >/dev/null && command -v jq >/dev/null || { echo "SKIP: needs curl and jq"; exit 77; }
. "$(dirname "$0")/../testutil.sh"

"$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 >/dev/null 2>&1 || { echo "mkmodel failed"; exit 1; }
KVT_SERVE_ARGS=(-m "$TMP/m.gguf" --host 127.0.0.1 -t 1)

# the SSE stream in $TMP/sse: concatenated text deltas
sse_text() { grep '^data: {' "$TMP/sse" | sed 's/^data: //' | jq -j '.choices[0]? | (.delta.content // .text // "")'; }

"$BIN" serve --help >"$TMP/help" 2>&1
check "serve --help exits 0" is "$?" 0
for flag in --model --host --port --parallel --queue --ctx --kv-active --kv-ram --threads --api-key --api-key-file \
  --chat-template --max-body --max-tokens-limit --prefill-chunk --timeout --alias; do
  check "serve --help explains $flag" grep -q -- "$flag" "$TMP/help"
done
"$BIN" serve --bogus >/dev/null 2>&1; check "serve unknown flag is a usage error" is "$?" 2
"$BIN" serve --chat-template nope >/dev/null 2>&1; check "serve bad template is a usage error" is "$?" 2

LONG="The quick brown fox jumps over the lazy dog while the cache keeps every block it has seen before, so a repeat is cheap."
# --explain-text: the reuse reports below show the cached side too; --admin-key opens the lint
kvt_start_server main --parallel 4 --timeout 2 --max-body 65536 --max-tokens-limit 512 --ctx 1024 --explain-text \
  --admin-key adm-key
ADMIN=(-H 'Authorization: Bearer adm-key')
MAIN_PID=$SRV_PID

# ---- basics -------------------------------------------------------------------------
CODE=$(curl -s -m 10 -o "$TMP/body" -w '%{http_code}' "$URL/health")
check "health 200" is "$CODE" 200
check "health ok" is "$(jb .status)" ok
CODE=$(curl -s -m 10 -o "$TMP/body" -w '%{http_code}' "$URL/v1/models")
check "models 200" is "$CODE" 200
check "models lists the model" is "$(jb '.data[0].id')" m

post /v1/completions "{\"prompt\":\"$LONG\",\"max_tokens\":8,\"temperature\":0}"
check "completion 200" is "$CODE" 200
check "completion object" is "$(jb .object)" text_completion
check "completion finish_reason" is "$(jb '.choices[0].finish_reason')" length
check "completion tokens" is "$(jb .usage.completion_tokens)" 8
check "total tokens" is "$(jb '.usage.total_tokens == .usage.prompt_tokens + .usage.completion_tokens')" true
check "first request computes everything" is "$(jb .usage.prompt_tokens_details.cached_tokens)" 0
check "kvtier report per tier" is "$(jb '.kvtier.cached_tokens_by_tier | keys | join(",")')" T0,T1,T2,T3
check "kvtier computed" is "$(jb '.kvtier.computed_tokens == .usage.prompt_tokens')" true
check "first request: reuse stopped at block 0, never seen" is "$(jb '.kvtier.reuse_stop | "\(.reason) \(.block) \(.token_offset)"')" "never_seen 0 0"
TEXT1=$(jb '.choices[0].text')
P1=$(jb .usage.prompt_tokens)
post /v1/completions "{\"prompt\":\"$LONG\",\"max_tokens\":8,\"temperature\":0}"
check "repeat reports cached tokens" gt "$(jb .usage.prompt_tokens_details.cached_tokens)" 0
check "repeat cached from T0" is "$(jb '.kvtier.cached_tokens_by_tier.T0 == .usage.prompt_tokens_details.cached_tokens')" true
check "repeat cached + computed = prompt" is "$(jb '.kvtier.cached_tokens + .kvtier.computed_tokens == .usage.prompt_tokens')" true
check "greedy repeat is identical" is "$(jb '.choices[0].text')" "$TEXT1"
check "repeat: everything reusable reused" is "$(jb .kvtier.reuse_stop.reason)" end_of_prompt
# why did this miss? the same text with one word changed in the middle
post /v1/completions "{\"prompt\":\"${LONG/lazy dog/lazy cat}\",\"max_tokens\":2,\"temperature\":0}"
check "changed word: diverged" is "$(jb .kvtier.reuse_stop.reason)" diverged
check "changed word: offset past the block start" is "$(jb '.kvtier.reuse_stop.token_offset >= .kvtier.reuse_stop.block * 32 and .kvtier.reuse_stop.token_offset > 0')" true
check "changed word: the texts differ" is "$(jb '.kvtier.reuse_stop | (.prompt_text | test("c")) and (.cached_text | test("d"))')" true
for _ in 1 2; do post /v1/completions '{"prompt":"Hi there","max_tokens":2,"temperature":0}'; done
check "short prompt twice: shorter than a block" is "$(jb .kvtier.reuse_stop.reason)" prompt_shorter_than_block
post /v1/completions "{\"prompt\":\"$LONG\",\"max_tokens\":2,\"temperature\":0,\"cache_salt\":\"t-explain\"}"
check "salted repeat: different namespace" is "$(jb .kvtier.reuse_stop.reason)" different_namespace
# GET /v1/cache/lint over the tenant's last prompts: a planted timestamp near the top
for i in 1 2 3; do
  post /v1/completions "{\"prompt\":\"Now: 2026-11-30 09:1$i:0$i. $LONG Question $i?\",\"max_tokens\":1,\"cache_salt\":\"lint-t\"}"
done
CODE=$(curl -s -m 10 -o "$TMP/body" -w '%{http_code}' "${ADMIN[@]}" "$URL/v1/cache/lint?cache_salt=lint-t")
check "lint 200" is "$CODE" 200
check "lint with cache_salt sees only that salt's prompts" is "$(jb .prompts)" 3
check "lint names the timestamp" is "$(jb '.causes[0].cause')" timestamp
check "lint: fixes raise the fraction" is "$(jb '.reusable_fraction_after_fixes > .reusable_fraction')" true
check "lint advice moves the timestamp" is "$(jb '.advice[0] | test("move the timestamp")')" true
# fixed context blocks: kvtier.documents in chat, A,B twice, then B,A
DA='{"id":"a","text":"The warehouse in Lyon ships orders on Mondays and Thursdays only."}'
DB='{"id":"b","text":"Refunds go back to the original card within five business days."}'
chat_docs() { post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"$1\"}],\"max_tokens\":2,\"temperature\":0,\"kvtier\":{\"documents\":[$2]}}"; }
chat_docs "When will my order ship?" "$DA,$DB"
check "documents 200" is "$CODE" 200
chat_docs "Where does my refund go?" "$DA,$DB"
check "same documents: every document block reused" is "$(jb '.kvtier.reuse_stop.block >= 3 and .kvtier.cached_tokens >= 96')" true
chat_docs "When will my order ship?" "$DB,$DA"
check "documents B,A after A,B: diverged at the first document's block" is "$(jb '.kvtier.reuse_stop | "\(.reason) \(.block)"')" "diverged 1"
chat_docs "x" '{"id":"a","text":"t","extra":1}'
check "a document with an unknown field is 400" is "$CODE" 400
check "... naming kvtier.documents" is "$(jb .error.param)" kvtier.documents
CODE=$(curl -s -m 10 -o "$TMP/body" -w '%{http_code}' "${ADMIN[@]}" "$URL/v1/cache/lint?n=0")
check "lint bad n is 400" is "$CODE" 400
# counts in a query are digits alone: no sign, no blank, nothing past 2^64 (strtoull would take them)
for qp in "cache/lint?n=%2B5 n" "cache/lint?n=%205 n" "cache/events?since=18446744073709551616 'since'" \
  "cache/events?since=%2B1 'since'" "cache/events?since=1&max=%202 'max'" "cache/events?max=-1 'max'"; do
  q=${qp% *} p=${qp##* }
  CODE=$(curl -s -m 10 -o "$TMP/body" -w '%{http_code}' "${ADMIN[@]}" "$URL/v1/$q")
  check "GET /v1/$q is 400 naming $p" is "$CODE/$(jb .error.message | cut -d' ' -f1)" "400/$p"
done
CODE=$(curl -s -m 10 -o "$TMP/body" -w '%{http_code}' "${ADMIN[@]}" "$URL/v1/cache/events?since=18446744073709551615&max=1")
check "... and since 2^64-1 is a number" is "$CODE" 200
# a query parameter given twice is a 400 naming it, on any route: which copy was meant is a guess
for qp in "v1/cache/events?since=1&since=2 since" "v1/cache/events?max=1&since=0&max=2 max" \
  "v1/cache/lint?n=1&n=1 n" "v1/cache/lookup?tiers=1&prompt=x&tiers=1 tiers" "health?probe&probe=1 probe"; do
  q=${qp% *} p=${qp##* }
  CODE=$(curl -s -m 10 -o "$TMP/body" -w '%{http_code}' "${ADMIN[@]}" "$URL/$q")
  check "GET /$q is 400 naming $p" is "$CODE/$(jb .error.param)/$(jb .error.code)" "400/$p/duplicate_parameter"
done
check "... and the message says so" grep -qF "'probe' is given more than once" "$TMP/body"
CODE=$(curl -s -m 10 -o "$TMP/body" -w '%{http_code}' "${ADMIN[@]}" "$URL/v1/cache/events?since=0&max=1")
check "... while each once is fine" is "$CODE" 200

# streaming completion equals the plain one
curl -sN -m 60 -H 'Content-Type: application/json' -d "{\"prompt\":\"$LONG\",\"max_tokens\":8,\"temperature\":0,\"stream\":true}" "$URL/v1/completions" >"$TMP/sse"
check "completion stream ends with [DONE]" is "$(tail -n 2 "$TMP/sse" | head -n 1)" "data: [DONE]"
check "completion stream text = plain text" is "$(sse_text)" "$TEXT1"
check "completion stream final chunk has kvtier" is "$(grep '^data: {' "$TMP/sse" | tail -n 1 | sed 's/^data: //' | jq -r '.kvtier.cached_tokens > 0')" true

# max_tokens and stop strings
post /v1/completions "{\"prompt\":\"$LONG\",\"max_completion_tokens\":3,\"temperature\":0}"
check "max_completion_tokens" is "$(jb .usage.completion_tokens)" 3
# the model and the prompt are fixed and decoding is greedy, so the reply is too: it must be long
# enough to take a stop string from (the checks below must not skip themselves)
STOP=$(printf '%s' "$TEXT1" | jq -Rr '.[2:4]')
check "the greedy reply is long enough for the stop test ('$TEXT1')" is "${#STOP}" 2
post /v1/completions "$(jq -nc --arg p "$LONG" --arg s "$STOP" '{prompt:$p,max_tokens:8,temperature:0,stop:[$s]}')"
check "stop finish_reason" is "$(jb '.choices[0].finish_reason')" stop
check "text ends before the stop string" is "$(jb '.choices[0].text')" "$(printf '%s' "$TEXT1" | jq -Rr '.[0:2]')"

# chat: plain and streamed agree; role chunk, usage chunk, kvtier in the final chunk
CHAT='{"messages":[{"role":"system","content":"You are a terse assistant that answers in one word."},{"role":"user","content":"Name a colour of the sky on a clear day."}],"max_tokens":40,"temperature":0}'
post /v1/chat/completions "$CHAT"
check "chat 200" is "$CODE" 200
check "chat object" is "$(jb .object)" chat.completion
check "chat role" is "$(jb '.choices[0].message.role')" assistant
REPLY=$(jb '.choices[0].message.content')
CP=$(jb .usage.prompt_tokens)
CC=$(jb .usage.completion_tokens)
curl -sN -m 60 -H 'Content-Type: application/json' -d "$(jq -c '. + {stream:true, stream_options:{include_usage:true}}' <<<"$CHAT")" "$URL/v1/chat/completions" >"$TMP/sse"
check "chat stream role chunk" is "$(grep '^data: {' "$TMP/sse" | head -n 1 | sed 's/^data: //' | jq -r '.choices[0].delta.role')" assistant
check "chat stream text = plain reply" is "$(sse_text)" "$REPLY"
check "chat stream usage chunk" is "$(grep '^data: {' "$TMP/sse" | tail -n 1 | sed 's/^data: //' | jq -r '(.choices|length)==0 and .usage.completion_tokens > 0 and (.kvtier|type)=="object"')" true
check "chat stream [DONE]" grep -q '^data: \[DONE\]' "$TMP/sse"
check "with include_usage every chunk before it has usage: null (OpenAI's shape)" is \
  "$(grep '^data: {' "$TMP/sse" | sed 's/^data: //' | jq -s '.[:-1] | length > 1 and all(has("usage") and .usage == null)')" true
curl -sN -m 60 -H 'Content-Type: application/json' -d "$(jq -c '. + {stream:true}' <<<"$CHAT")" "$URL/v1/chat/completions" >"$TMP/sse"
check "without include_usage no chunk has usage" is "$(grep '^data: {' "$TMP/sse" | sed 's/^data: //' | jq -s 'any(has("usage"))')" false

# the second turn reuses the first turn's tokens, the reply kvtier generated included
TURN2=$(jq -c --arg r "$REPLY" '.messages += [{"role":"assistant","content":$r},{"role":"user","content":"And at night?"}]' <<<"$CHAT")
post /v1/chat/completions "$TURN2"
check "turn 2 200" is "$CODE" 200
C2=$(jb .usage.prompt_tokens_details.cached_tokens)
# the first turn's sequence held its prompt and all but the last reply token
WANT=$(( (CP + CC - 1) / 32 * 32 ))
check "turn 2 reuses whole blocks of turn 1 incl. the reply ($C2 >= $WANT)" ge "$C2" "$WANT"
check "turn 1's reply reaches a block past its prompt (so reply reuse is observable)" gt "$WANT" "$CP"
check "turn 2 reuse goes past the first prompt into the reply" gt "$C2" "$CP"

# ---- errors ------------------------------------------------------------------------------
post /v1/completions '{"prompt": "x",'
check "malformed JSON 400" is "$CODE" 400
check "malformed JSON error shape" is "$(jb '.error | has("message") and has("type") and has("param") and has("code")')" true
post /v1/completions '[1,2]'
check "non-object body 400" is "$CODE" 400
post /v1/completions '{"prompt":"x","max_tokens":"5"}'
check "wrong type 400" is "$CODE" 400
check "wrong type names param" is "$(jb .error.param)" max_tokens
post /v1/completions '{"prompt":"x","temperature":"hot"}'
check "temperature type 400" is "$(jb .error.param)" temperature
post /v1/completions '{"prompt":"x","n":17}'
check "n=17 (above 16) 400" is "$CODE" 400
post /v1/completions '{"prompt":"x","max_tokens":100000}'
check "max_tokens over limit 400" is "$CODE" 400
post /v1/completions '{"prompt":"x","max_tokens":0}'
check "max_tokens 0 400" is "$CODE" 400
post /v1/completions '{"max_tokens":3}'
check "missing prompt 400" is "$(jb .error.param)" prompt
post /v1/chat/completions '{"messages":"hi"}'
check "messages type 400" is "$CODE" 400
post /v1/chat/completions '{"messages":[{"role":"wizard","content":"hi"}]}'
check "bad role 400" is "$CODE" 400
post /v1/completions '{"prompt":"x","stop":5}'
check "stop type 400" is "$(jb .error.param)" stop
post /v1/completions '{"prompt":[1,2,99999]}'
check "token id outside vocab 400" is "$CODE" 400
post /v1/completions "$(jq -nc --arg p "$(head -c 3000 /dev/zero | tr '\0' a)" '{prompt:$p}')"
check "prompt over context 400" is "$CODE" 400
check "prompt over context explained" is "$(jb .error.code)" context_length_exceeded
head -c 70000 /dev/zero | tr '\0' a >"$TMP/huge"
CODE=$(curl -s -m 20 -o "$TMP/body" -w '%{http_code}' -H 'Content-Type: application/json' --data-binary @"$TMP/huge" "$URL/v1/completions")
check "huge body 413" is "$CODE" 413
CODE=$(curl -s -m 20 -o "$TMP/body" -w '%{http_code}' -H 'Transfer-Encoding: chunked' -H 'Content-Type: application/json' --data-binary @"$TMP/huge" "$URL/v1/completions")
check "huge chunked body 413" is "$CODE" 413
CODE=$(curl -s -m 10 -o "$TMP/body" -w '%{http_code}' "$URL/v2/nothing")
check "unknown route 404" is "$CODE" 404
CODE=$(curl -s -m 10 -o /dev/null -w '%{http_code}' "$URL/v1/completions")
check "GET on a POST route 405" is "$CODE" 405
CODE=$(curl -s -m 10 -o /dev/null -w '%{http_code}' -X POST "$URL/health")
check "POST on a GET route 405" is "$CODE" 405

# malformed HTTP and a slowloris client: answered or dropped, the server stays up
exec 3<>"/dev/tcp/127.0.0.1/$PORT"; printf 'THIS IS NOT HTTP\r\n\r\n' >&3; timeout 5 cat <&3 >"$TMP/garbage"; exec 3>&-
check "malformed request line gets 4xx" grep -q '^HTTP/1.[01] 4' "$TMP/garbage"
exec 3<>"/dev/tcp/127.0.0.1/$PORT"; printf 'GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n' >&3; timeout 5 cat <&3 >"$TMP/garbage"; exec 3>&-
check "absurd Content-Length answered" grep -q '^HTTP/1.[01] [45]' "$TMP/garbage"
exec 4<>"/dev/tcp/127.0.0.1/$PORT"; printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Len' >&4
CODE=$(curl -s -m 10 -o /dev/null -w '%{http_code}' "$URL/health")
check "serves others while a client stalls" is "$CODE" 200
# the server closes it (cat sees the end of the stream) rather than waiting on it for good
timeout 30 cat <&4 >/dev/null; rc=$?; exec 4>&-
check "stalled connection closed by the server's --timeout" is "$rc" 0
check "still up after slowloris" kill -0 "$MAIN_PID"

# ---- concurrency: 8 clients at once get what each gets alone --------------------------------
for i in $(seq 8); do
  post /v1/completions "{\"prompt\":\"Client $i asks: $LONG\",\"max_tokens\":12,\"temperature\":0,\"cache_salt\":\"solo\"}"
  jb '.choices[0].text' >"$TMP/solo$i"
done
# waits for the background clients in CLIENTS (not the servers)
wait_clients() { for j in "${CLIENTS[@]}"; do wait "$j"; done; CLIENTS=(); }
CLIENTS=()
for i in $(seq 8); do
  curl -s -m 60 -o "$TMP/par$i.json" -H 'Content-Type: application/json' \
    -d "{\"prompt\":\"Client $i asks: $LONG\",\"max_tokens\":12,\"temperature\":0,\"cache_salt\":\"par\"}" "$URL/v1/completions" &
  CLIENTS+=($!)
done
wait_clients
same=0
for i in $(seq 8); do
  jq -r '.choices[0].text' "$TMP/par$i.json" >"$TMP/partext$i" 2>/dev/null
  [ "$(jq -r .usage.completion_tokens "$TMP/par$i.json" 2>/dev/null)" = 12 ] && cmp -s "$TMP/solo$i" "$TMP/partext$i" && same=$((same + 1))
done
check "8 concurrent clients: complete and equal to solo outputs ($same/8)" is "$same" 8

# ---- tenant isolation by cache_salt -------------------------------------------------------
SALTED="{\"prompt\":\"Salted request: $LONG\",\"max_tokens\":2,\"temperature\":0"
post /v1/completions "$SALTED,\"cache_salt\":\"alice\"}"
post /v1/completions "$SALTED,\"cache_salt\":\"alice\"}"
check "same salt reuses" gt "$(jb .usage.prompt_tokens_details.cached_tokens)" 0
post /v1/completions "$SALTED,\"cache_salt\":\"bob\"}"
check "other salt sees nothing" is "$(jb .usage.prompt_tokens_details.cached_tokens)" 0
post /v1/completions "$SALTED}"
check "no salt sees nothing" is "$(jb .usage.prompt_tokens_details.cached_tokens)" 0

# ---- a client that goes away frees its sequence -----------------------------------------------
curl -sN -m 2 -H 'Content-Type: application/json' -d "{\"prompt\":\"$LONG\",\"max_tokens\":512,\"stream\":true}" "$URL/v1/completions" >/dev/null 2>&1
curl -s -m 2 -H 'Content-Type: application/json' -d "{\"prompt\":\"$LONG\",\"max_tokens\":512}" "$URL/v1/completions" >/dev/null 2>&1
busy=1
for _ in $(seq 50); do
  busy=$(curl -s -m 5 "$URL/health" | jq -r .slots_busy)
  [ "$busy" = 0 ] && break
  sleep 0.2
done
check "disconnected clients' sequences freed" is "$busy" 0

# ---- metrics -------------------------------------------------------------------------------------
curl -s -m 10 "$URL/metrics" >"$TMP/metrics"
for m in 'kvtier_requests_total{endpoint="completions",code="200"}' 'kvtier_requests_total{endpoint="completions",code="400"}' \
  'kvtier_cached_tokens_total{tier="T0"}' 'kvtier_tier_used_bytes{tier="T0"}' 'kvtier_tier_budget_bytes{tier="T1"}' \
  kvtier_cache_hit_ratio kvtier_queue_depth 'kvtier_tier_evictions_total{tier="T0"}' kvtier_time_to_first_token_seconds_count \
  kvtier_generated_tokens_total; do
  check "metrics has $m" grep -qF "$m " "$TMP/metrics"
done
check "metrics count misses by reason" ge "$(grep -F 'kvtier_cache_misses_total{reason="diverged"}' "$TMP/metrics" | awk '{print $2}')" 1
check "metrics count short-prompt misses" ge "$(grep -F 'kvtier_cache_misses_total{reason="prompt_shorter_than_block"}' "$TMP/metrics" | awk '{print $2}')" 2
check "metrics count cached T0 tokens" gt "$(grep -F 'kvtier_cached_tokens_total{tier="T0"}' "$TMP/metrics" | awk '{print $2}')" 0

# ---- graceful shutdown ----------------------------------------------------------------------------
kill -TERM "$MAIN_PID"
stopped=0
for _ in $(seq 50); do kill -0 "$MAIN_PID" 2>/dev/null || { stopped=1; break; }; sleep 0.1; done
check "SIGTERM stops the server" is "$stopped" 1
kvt_wait_server main; check "exit status 0 after SIGTERM" is "$?" 0

# ---- API keys: 401 without a valid key; each key its own cache namespace ----------------------------
printf '# keys\n\nkey-two\n' >"$TMP/keys"
# a 32k context, so that the request holding the slot below can run long enough for others to queue
"$BIN" mkmodel -o "$TMP/m32k.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 --ctx 32768 >/dev/null 2>&1 ||
  bad "mkmodel --ctx 32768 failed"
KVT_SERVE_ARGS=(-m "$TMP/m32k.gguf" --host 127.0.0.1 -t 1)
kvt_start_server keys --api-key key-one --api-key-file "$TMP/keys" --parallel 1 --queue 1 --ctx 32768 \
  --max-tokens-limit 32768
KVT_SERVE_ARGS=(-m "$TMP/m.gguf" --host 127.0.0.1 -t 1)
KEYED="{\"prompt\":\"Keyed: $LONG\",\"max_tokens\":2,\"temperature\":0}"
post /v1/completions "$KEYED"
check "no key 401" is "$CODE" 401
check "401 error shape" is "$(jb .error.code)" invalid_api_key
post /v1/completions "$KEYED" -H 'Authorization: Bearer wrong'
check "wrong key 401" is "$CODE" 401
CODE=$(curl -s -m 10 -o /dev/null -w '%{http_code}' "$URL/v1/models")
check "models needs a key" is "$CODE" 401
CODE=$(curl -s -m 10 -o /dev/null -w '%{http_code}' "$URL/health")
check "health needs no key" is "$CODE" 200
post /v1/completions "$KEYED" -H 'Authorization: Bearer key-one'
check "key one 200" is "$CODE" 200
post /v1/completions "$KEYED" -H 'Authorization: Bearer key-one'
check "key one reuses its cache" gt "$(jb .usage.prompt_tokens_details.cached_tokens)" 0
post /v1/completions "$KEYED" -H 'Authorization: Bearer key-two'
check "key from file 200" is "$CODE" 200
check "key two does not see key one's cache" is "$(jb .usage.prompt_tokens_details.cached_tokens)" 0

# ---- a full queue answers 503 with Retry-After -------------------------------------------------
# ignore_eos keeps the first request generating (up to 32k tokens) in the one slot and the second
# waits in the one queue place (both seen on /health) before the others arrive; the first two are
# streams, whose clients then hang up, which ends them
QPIDS=()
for i in 1 2 3 4; do
  curl -s -m 120 -o "$TMP/q$i" -D "$TMP/qh$i" -w '%{http_code}' -H 'Authorization: Bearer key-one' -H 'Content-Type: application/json' \
    -d "{\"prompt\":\"Queue $i\",\"max_tokens\":32000,\"temperature\":0,\"ignore_eos\":true,\"stream\":$([ "$i" -le 2 ] && echo true || echo false)}" \
    "$URL/v1/completions" >"$TMP/qc$i" &
  QPIDS+=($!)
  [ "$i" = 1 ] && { wait_health .slots_busy 1 || bad "the first request never held the slot"; }
  [ "$i" = 2 ] && { wait_health .queued 1 || bad "the second request never waited in the queue"; }
done
wait "${QPIDS[2]}" "${QPIDS[3]}"
kill "${QPIDS[0]}" "${QPIDS[1]}" 2>/dev/null
wait "${QPIDS[0]}" "${QPIDS[1]}" 2>/dev/null
wait_health .slots_busy 0 || bad "the hung-up streams still hold the slot"
n503=0
for i in 1 2 3 4; do
  if [ "$(cat "$TMP/qc$i")" = 503 ]; then n503=$((n503 + 1)); grep -qi '^Retry-After:' "$TMP/qh$i" || bad "503 lacks Retry-After"; fi
done
check "queue full gives 503 ($n503)" gt "$n503" 0
kvt_stop_server keys INT; check "SIGINT exits 0" is "$?" 0

kvt_test_done test_server
