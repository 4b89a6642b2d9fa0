#!/usr/bin/env bash
# Progress for long prefills: `run` and `eval` print progress lines on stderr
# with --progress even when stderr is not a terminal (here: a file), and
# none without it; stdout is byte for byte the same either way (the prefill
# goes in the engine's own batch chunks, so the same arithmetic). `serve`
# logs a prefill of 512+ tokens when it starts and when it ends, with the
# request's id; `serve --progress` adds progress lines for the model load,
# the disk tier's open scan and each long prefill (with its request id), in
# text and as typed JSON keys with --log-format json, and none without it.
# Needs curl for the serve part.
set -u
KVT_SRC=${KVT_SRC:?KVT_SRC must point to the source tree}
. "$KVT_SRC/tests/testutil.sh"
unset KVT_PROGRESS

"$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 --vocab 800 >/dev/null 2>&1 ||
  { echo "mkmodel failed"; exit 1; }
LONG=$(python3 -c "print(' '.join('word%d of a long document about tiers' % i for i in range(60)))")
SHORT="a short prompt"

check "run --help explains --progress" bash -c "'$BIN' run --help | grep -q -- '--progress'"
check "eval --help explains --progress" bash -c "'$BIN' eval --help | grep -q -- '--progress'"

# ---- run ------------------------------------------------------------------------------------------
"$BIN" run -m "$TMP/m.gguf" -p "$LONG" -n 6 --temp 0 -t 1 --no-cache >"$TMP/run1.out" 2>"$TMP/run1.err"
check "run without --progress (not a terminal) exits 0" test $? -eq 0
"$BIN" run -m "$TMP/m.gguf" -p "$LONG" -n 6 --temp 0 -t 1 --no-cache --progress >"$TMP/run2.out" 2>"$TMP/run2.err"
check "run --progress exits 0" test $? -eq 0
check "run: no progress line without --progress" bash -c "! grep -q 'progress:' '$TMP/run1.err'"
check "run --progress: the prefill's first line" grep -Eq 'info: progress: prefill: 0/[0-9]+ tokens \(0%\)' "$TMP/run2.err"
check "... and its last" grep -Eq 'info: progress: prefill: ([0-9]+)/\1 tokens \(100%\), [0-9.]+ s, done' "$TMP/run2.err"
check "... over the prompt's tokens" bash -c "n=\$(grep -o 'prompt [0-9]* tokens' '$TMP/run2.err' | grep -o '[0-9]*'); [ \"\$n\" -ge 512 ] && grep -q \"prefill: 0/\$n tokens\" '$TMP/run2.err'"
check "run --progress: stdout is the same" cmp -s "$TMP/run1.out" "$TMP/run2.out"
check "... and not empty" test -s "$TMP/run1.out"
# with the cache too (the default), and a short prompt prints no prefill line even with --progress
"$BIN" run -m "$TMP/m.gguf" -p "$LONG" -n 6 --temp 0 -t 1 >"$TMP/run3.out" 2>/dev/null
"$BIN" run -m "$TMP/m.gguf" -p "$LONG" -n 6 --temp 0 -t 1 --progress >"$TMP/run4.out" 2>"$TMP/run4.err"
check "run --progress with the cache: stdout is the same" cmp -s "$TMP/run3.out" "$TMP/run4.out"
check "... and the same as without the cache" cmp -s "$TMP/run1.out" "$TMP/run3.out"
"$BIN" run -m "$TMP/m.gguf" -p "$SHORT" -n 4 --temp 0 -t 1 --progress >/dev/null 2>"$TMP/run5.err"
check "run --progress: a short prompt's prefill has no line" bash -c "! grep -q 'progress: prefill' '$TMP/run5.err'"
check "KVTIER_PROGRESS=1 works as --progress" bash -c \
  "KVTIER_PROGRESS=1 '$BIN' run -m '$TMP/m.gguf' -p '$LONG' -n 2 --temp 0 -t 1 2>&1 >/dev/null | grep -q 'progress: prefill: 0/'"

# ---- eval -----------------------------------------------------------------------------------------
"$BIN" eval -m "$TMP/m.gguf" -n 4 -t 1 "$LONG" >"$TMP/eval1.out" 2>"$TMP/eval1.err"
check "eval exits 0" test $? -eq 0
"$BIN" eval -m "$TMP/m.gguf" -n 4 -t 1 --progress "$LONG" >"$TMP/eval2.out" 2>"$TMP/eval2.err"
check "eval --progress exits 0" test $? -eq 0
check "eval: no progress line without --progress" bash -c "! grep -q 'progress:' '$TMP/eval1.err'"
check "eval --progress: the prefill's first and last lines" bash -c \
  "grep -q 'progress: prefill: 0/' '$TMP/eval2.err' && grep -Eq 'progress: prefill: ([0-9]+)/\\1 tokens \\(100%\\).*done' '$TMP/eval2.err'"
check "eval --progress: stdout is the same" cmp -s "$TMP/eval1.out" "$TMP/eval2.out"
check "... a JSON line with every prompt position" python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
assert len(d['prompt_tokens']) >= 512 and len(d['prompt_logits_top5']) == len(d['prompt_tokens'])" "$TMP/eval2.out"

# ---- serve --progress: progress lines though stderr is a file -------------------------------------------
# serve_progress: a server with --progress (text, then JSON logs) gets a long, a short and a long prompt
serve_progress() {
  local fmt
  check "serve --help explains --progress" bash -c "'$BIN' serve --help | grep -A1 -- '--progress' | grep -q 'prefill'"
  check "... and so does the manual" bash -c "'$BIN' --man | grep -A1 'fB\\\\-\\\\-progress' | grep -q 'each prefill of 512+ tokens'"
  for fmt in text json; do
    kvt_start_server "p$fmt" -m "$TMP/m.gguf" --host 127.0.0.1 -t 1 --progress --log-format $fmt --kv-disk "$TMP/kv-$fmt"
    for id in long-1 short-1; do
      p=$LONG; [ $id = short-1 ] && p=$SHORT
      curl -s -m 60 -H 'Content-Type: application/json' -H "X-Request-Id: $id" -o /dev/null \
        -d "{\"prompt\": \"$p\", \"max_tokens\": 2, \"temperature\": 0}" "$URL/v1/completions"
    done
    kvt_stop_server "p$fmt"
    check "serve --progress ($fmt) stops cleanly" test $? -eq 0
  done
  local log=$TMP/ptext.log
  check "serve --progress: the model load's first and last lines" bash -c \
    "grep -Eq 'info: progress: loading .*m.gguf: 0/[0-9]+ layers \(0%\)' '$log' && grep -Eq 'info: progress: loading .*m.gguf: ([0-9]+)/\1 layers \(100%\), [0-9.]+ s, done' '$log'"
  check "... the disk tier's open scan" grep -Eq 'info: progress: disk tier .*kv-text: scanning record headers: .*, done$' "$log"
  check "... a long prefill's first line, with its request id" grep -Eq 'info: progress: prefill long-1: 0/[0-9]+ tokens \(0%\), 0.0 s$' "$log"
  check "... and its last" grep -Eq 'info: progress: prefill long-1: ([0-9]+)/\1 tokens \(100%\), [0-9.]+ s, done$' "$log"
  check "... over the tokens it computes" bash -c "n=\$(grep -o 'prefill long-1: [0-9]* tokens to compute' '$log' | grep -o '[0-9]* tokens' | grep -o '[0-9]*'); [ \"\$n\" -ge 512 ] && grep -q \"progress: prefill long-1: 0/\$n tokens\" '$log'"
  check "... and none for a short prompt" bash -c "! grep -q 'progress: prefill short-1' '$log'"
  log=$TMP/pjson.log
  check "serve --progress --log-format json: every line typed (tests/jsonlog_check.py)" \
    python3 "$KVT_SRC/tests/jsonlog_check.py" --min 8 --ids long-1,short-1 "$log"
  check "... the prefill's progress as keys: request_id, done/total tokens, finished" python3 - "$log" <<'PY'
import json, sys
p = [d for d in map(json.loads, open(sys.argv[1])) if d["msg"].startswith("progress: prefill")]
assert len(p) >= 2 and all(d["request_id"] == "long-1" and d["what"] == "prefill" for d in p), p
a, b = p[0], p[-1]  # and between them (a slow machine), one a second
assert a["done"] == 0 and a["total"] >= 512 and a["finished"] is False and a["unit"] == "tokens", a
assert b["done"] == b["total"] == a["total"] and b["finished"] is True and b["percent"] == 100.0, b
assert isinstance(b["elapsed_s"], float), b
done = [d["done"] for d in p]
assert done == sorted(done) and not any(d["finished"] for d in p[:-1]), p
m = [d for d in map(json.loads, open(sys.argv[1])) if d["msg"].startswith("progress: loading")]
assert len(m) >= 2 and "request_id" not in m[0] and m[-1]["finished"] is True, m
PY
}

# ---- serve: a log line at the start and the end of a long prefill ---------------------------------------
if command -v curl >/dev/null; then
  "$BIN" serve -m "$TMP/m.gguf" --host 127.0.0.1 --port 0 -t 1 >"$TMP/serve.log" 2>&1 &
  SRV=$!
  URL=
  for _ in $(seq 200); do
    port=$(grep -ao 'listening on http://127.0.0.1:[0-9]*' "$TMP/serve.log" | grep -o '[0-9]*$')
    [ -n "$port" ] && { URL="http://127.0.0.1:$port"; break; }
    kill -0 "$SRV" 2>/dev/null || break
    sleep 0.1
  done
  check "serve starts" test -n "$URL"
  for id in long-1 short-1 long-2; do
    p=$LONG; [ $id = short-1 ] && p=$SHORT
    [ $id = long-2 ] && p="$LONG and then some more words"
    curl -s -m 60 -H 'Content-Type: application/json' -H "X-Request-Id: $id" -o "$TMP/$id.json" \
      -d "{\"prompt\": \"$p\", \"max_tokens\": 2, \"temperature\": 0}" "$URL/v1/completions"
  done
  kill -TERM "$SRV"; wait "$SRV"
  check "serve logs a long prefill's start with its request id" \
    grep -Eq 'info: serve: prefill long-1: [0-9]+ tokens to compute, 0 restored from the cache$' "$TMP/serve.log"
  check "... and its end" grep -Eq 'info: serve: prefill long-1: [0-9]+ tokens computed in [0-9.]+ s \([0-9]+ tok/s\)$' "$TMP/serve.log"
  check "... the count being the response's computed tokens" python3 -c "
import json, re, sys
n = json.load(open(sys.argv[1]))['kvtier']['computed_tokens']
assert re.search(r'serve: prefill long-1: %d tokens to compute' % n, open(sys.argv[2]).read()), n" "$TMP/long-1.json" "$TMP/serve.log"
  check "no prefill line for a short prompt" bash -c "! grep -q 'prefill short-1' '$TMP/serve.log'"
  check "a repeat that reuses the cache computes too little for a line" bash -c "! grep -q 'prefill long-2' '$TMP/serve.log'"
  check "serve without --progress (not a terminal): no progress line" bash -c "! grep -q 'progress:' '$TMP/serve.log'"
  serve_progress
else
  echo "SKIP part: curl is not installed (the serve prefill log line)"
fi

kvt_test_done test_progress
