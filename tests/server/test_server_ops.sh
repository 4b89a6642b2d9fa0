#!/usr/bin/env bash
# kvtier serve as an operator runs it: JSON logs in a file (every line a JSON
# object with an ISO-8601 UTC timestamp and a level, its figures and request
# id as typed keys of their own, tests/jsonlog_check.py, which must also
# reject broken lines; a link is never followed),
# /metrics clean under a strict exposition-format check (tests/promcheck.py,
# which must also reject broken copies) with build, process and per-endpoint
# duration series, the /dashboard page (self-contained, its numbers /metrics'
# numbers: tests/dashboard_check.cjs runs its script in Node), and the disk
# tier's index checkpoint across a graceful restart and a kill -9.
# Needs curl and python3; the dashboard's script check needs node.
set -u
HERE=${KVT_SRC:?KVT_SRC must point to the source tree}/tests
command -v curl >/dev/null || { echo "SKIP: needs curl"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: needs python3 for tests/promcheck.py"; exit 77; }
. "$(dirname "$0")/../testutil.sh"
skipped=0

"$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 --vocab 800 >/dev/null 2>&1 ||
  { echo "mkmodel failed"; exit 1; }

KVT_SERVE_ARGS=(-m "$TMP/m.gguf" --host 127.0.0.1 -t 1)
# start NAME LOG ARGS...: kvtier serve NAME, logging to LOG (its --log-file, else $TMP/NAME.log)
start() { local name=$1; shift 2; kvt_start_server "$name" "$@"; }
stop() { kvt_stop_server "$SRV_NAME"; }
# ask URL PROMPT OUT: a greedy completion
ask() {
  curl -s -m 60 -H 'Content-Type: application/json' -o "$3" \
    -d "{\"prompt\": \"$2\", \"max_tokens\": 8, \"temperature\": 0}" "$1/v1/completions"
}
text_of() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["choices"][0]["text"])' "$1"; }
t2_of() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["kvtier"]["cached_tokens_by_tier"]["T2"])' "$1" 2>/dev/null || echo 0; }

"$BIN" serve --help >"$TMP/help" 2>&1
check "--help explains --log-format" grep -q -- '--log-format FMT' "$TMP/help"
check "--help explains --log-file" grep -q -- '--log-file PATH' "$TMP/help"
check "a bad --log-format is a usage error" bash -c "! '$BIN' serve -m '$TMP/m.gguf' --log-format xml 2>'$TMP/bad.err' && grep -q \"got 'xml'\" '$TMP/bad.err'"

# ---- a log file is never reached through a link ----------------------------------------------------
echo precious >"$TMP/target"
ln -s "$TMP/target" "$TMP/link.jsonl"
"$BIN" serve -m "$TMP/m.gguf" --port 0 --log-file "$TMP/link.jsonl" 2>"$TMP/link.err"
check "--log-file through a symlink is refused" test $? -ne 0
check "... saying why" grep -q 'symbolic link' "$TMP/link.err"
check "... and its target is untouched" test "$(cat "$TMP/target")" = precious

# ---- JSON logs, metrics, dashboard ------------------------------------------------------------------
LOG=$TMP/a.jsonl
PROMPT="A long and fixed system prompt that every request of this service starts with, then: what is kept on disk"
start a "$LOG" --log-format json --log-file "$LOG" --kv-disk "$TMP/kv" --kv-disk-size 64M --write-through \
  --kv-disk-admit-all
ask "$URL" "$PROMPT" "$TMP/r1.json"
check "a completion answers" test -n "$(text_of "$TMP/r1.json")"
curl -s -m 10 -H 'Content-Type: application/json' -o /dev/null \
  -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}' "$URL/v1/chat/completions"
curl -s -m 10 -o /dev/null "$URL/health"
curl -s -m 10 -o /dev/null "$URL/nope"
curl -s -m 10 "$URL/metrics" >"$TMP/metrics.txt"
check "nothing but the log file gets log lines" test ! -s "$TMP/a.log"
check "every log line is a JSON object with ts, level and msg" python3 - "$LOG" <<'PY'
import json, re, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) >= 5, lines
for l in lines:
    d = json.loads(l)
    assert list(d)[:3] == ["ts", "level", "msg"], d
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", d["ts"]), d
    assert d["level"] in ("error", "warn", "info", "debug"), d
PY
check "access lines carry each field as a JSON key, the completion's equal to its response" \
  python3 - "$LOG" "$TMP/r1.json" <<'PY'
import json, sys
acc = [d for d in map(json.loads, open(sys.argv[1])) if d["msg"] == "access"]
keys = ["ts", "level", "msg", "method", "path", "status", "request_id", "tenant", "prompt_tokens", "cached_tokens",
        "computed_tokens", "generated_tokens", "ttft_ms", "total_ms", "complete", "client"]
for d in acc:
    assert list(d) == keys, d
    assert d["request_id"].startswith("req-") and d["tenant"] is None and d["complete"] is True, d
    assert isinstance(d["total_ms"], (int, float)) and d["total_ms"] >= 0, d
by = {(d["method"], d["path"]): d for d in acc}
c, r = by[("POST", "/v1/completions")], json.load(open(sys.argv[2]))
assert c["status"] == 200, c
assert c["prompt_tokens"] == r["usage"]["prompt_tokens"] > 0, (c, r)
assert c["generated_tokens"] == r["usage"]["completion_tokens"], (c, r)
assert c["cached_tokens"] == r["kvtier"]["cached_tokens"], (c, r)
assert c["computed_tokens"] == r["kvtier"]["computed_tokens"] == c["prompt_tokens"] - c["cached_tokens"], (c, r)
assert isinstance(c["ttft_ms"], float) and 0 <= c["ttft_ms"] <= c["total_ms"], c
assert by[("POST", "/v1/chat/completions")]["status"] == 200
n = by[("GET", "/nope")]
assert n["status"] == 404 and n["prompt_tokens"] is None and n["ttft_ms"] is None, n
assert by[("GET", "/health")]["status"] == 200
PY
check "and the start-up line" grep -q '"level":"info","msg":"serve: listening on http://127.0.0.1:' "$LOG"
check "... with the port as a number" python3 -c "import json,sys; d=[json.loads(l) for l in open(sys.argv[1]) if 'listening on' in l][0]; sys.exit(d['port'] != int(sys.argv[2]) or d['address'] != '127.0.0.1')" "$LOG" "$PORT"

check "/metrics passes the strict exposition check" python3 "$HERE/promcheck.py" "$TMP/metrics.txt"
check "kvtier_build_info names version, commit, kernels and numerics" \
  grep -Eq '^kvtier_build_info\{version="[0-9.]+",commit="[^"]+",ops_variant="(scalar|avx2|avx512|amx)",numerics="kvt-ops-[^"]+"\} 1$' "$TMP/metrics.txt"
check "kvtier_device_info says the engine runs on the CPU" \
  grep -Eq '^kvtier_device_info\{device="cpu",name="cpu",numerics="kvt-ops-[^"]+"\} 1$' "$TMP/metrics.txt"
check "kvtier_device_lost is 0" grep -qx 'kvtier_device_lost 0' "$TMP/metrics.txt"
for m in process_cpu_seconds_total process_resident_memory_bytes process_open_fds process_start_time_seconds; do
  check "/metrics has $m" grep -Eq "^$m [0-9.e+]+$" "$TMP/metrics.txt"
done
check "RSS is a real figure" python3 -c "import sys; v=[float(l.split()[1]) for l in open(sys.argv[1]) if l.startswith('process_resident_memory_bytes ')][0]; sys.exit(0 if v > 1e6 else 1)" "$TMP/metrics.txt"
check "request durations per endpoint" grep -q '^kvtier_request_duration_seconds_count{endpoint="completions"} 1$' "$TMP/metrics.txt"
check "... also for chat, health and unknown routes" bash -c "grep -q 'duration_seconds_count{endpoint=\"chat_completions\"} 1' '$TMP/metrics.txt' && grep -q 'duration_seconds_count{endpoint=\"health\"} 1' '$TMP/metrics.txt' && grep -q 'duration_seconds_count{endpoint=\"other\"} 1' '$TMP/metrics.txt'"
check "the TTFT histogram counts both generations" grep -q '^kvtier_time_to_first_token_seconds_count 2$' "$TMP/metrics.txt"
# the checker is not vacuous: each broken copy is refused
broken() { python3 - "$TMP/metrics.txt" "$1" "$TMP/broken.txt" <<'PY'
import re, sys
t, kind = open(sys.argv[1]).read(), sys.argv[2]
if kind == "buckets":  # a bucket below the one before it
    t = re.sub(r'(kvtier_time_to_first_token_seconds_bucket\{le="\+Inf"\}) \d+', r'\1 0', t)
elif kind == "help":
    t = t.replace("# HELP kvtier_queue_depth", "# HELP kvtier_queue_depth x\n# HELP kvtier_queue_depth", 1)
elif kind == "counter":
    t = t.replace("kvtier_generations_total", "kvtier_generations")
elif kind == "split":  # one family's samples in two places
    t += 'kvtier_cached_tokens_total{tier="T9"} 1\n'
elif kind == "unit":  # the unit not last
    t = t.replace("kvtier_tier_used_bytes", "kvtier_tier_bytes_used")
elif kind == "label":
    t = t.replace('tier="T1"', 'tier="T\\q1"', 1)
open(sys.argv[3], "w").write(t)
PY
  ! python3 "$HERE/promcheck.py" "$TMP/broken.txt" >/dev/null
}
for k in buckets help counter split unit label; do check "promcheck refuses a broken copy ($k)" broken $k; done

# two generations the "last requests" table must show as their responses say: a repeat (reused) and a new one
for id in dash-1 dash-2; do
  p=$PROMPT; [ $id = dash-2 ] && p="Something else entirely, about tiers"
  curl -s -m 60 -H 'Content-Type: application/json' -H "X-Request-Id: $id" -o "$TMP/$id.json" \
    -d "{\"prompt\": \"$p\", \"max_tokens\": 4, \"temperature\": 0}" "$URL/v1/completions"
done
curl -s -m 10 -D "$TMP/dash.h" -o "$TMP/dash.html" "$URL/dashboard"
curl -s -m 10 "$URL/metrics" >"$TMP/metrics2.txt"
curl -s -m 10 "$URL/dashboard/requests" >"$TMP/recent.json"
check "/dashboard is HTML" grep -qi '^content-type: text/html' "$TMP/dash.h"
check "... with a policy that forbids outside assets" grep -qi "^content-security-policy: default-src 'none'" "$TMP/dash.h"
check "... and refers to nothing outside itself" bash -c "! grep -Eiq '(src|href)=|https?://|@import|url\(' '$TMP/dash.html'"
check "... shows the tiers" grep -q '<table id="tiers">' "$TMP/dash.html"
check "... lists the last requests, the newest first" python3 - "$TMP/dash.html" "$TMP/recent.json" <<'PY'
import json, re, sys
page, q = open(sys.argv[1]).read(), json.load(open(sys.argv[2]))["requests"]
ids = re.findall(r'<tr data-id="([^"]*)">', re.search(r'<tbody id="recent-rows">(.*?)</tbody>', page, re.S)[1])
assert ids[:2] == ["dash-2", "dash-1"] and ids == [x["request_id"] for x in q] and len(ids) == 4, ids
assert q[1]["reuse_stop"]["reason"] == "end_of_prompt" and q[1]["cached_tokens_by_tier"]["T0"] > 0, q[1]
PY
check "... with T2's budget (64 MiB)" grep -q 'kvtier_tier_budget_bytes{tier=&quot;T2&quot;}" data-f="bytes">64.0 MiB<' "$TMP/dash.html"
if command -v node >/dev/null; then
  check "the page's script shows /metrics' numbers and the responses' in the last requests, and draws the chart" \
    node "$HERE/dashboard_check.cjs" "$TMP/dash.html" "$TMP/metrics2.txt" "$TMP/recent.json" \
    "dash-1=$TMP/dash-1.json" "dash-2=$TMP/dash-2.json"
else
  echo "SKIP part: node is not installed (the dashboard script check)"; skipped=1
fi
# where a headless Chromium is installed (not in CI: ~220-290 MB), the page in a real browser under its
# Content-Security-Policy: the script reaches /metrics and /dashboard/requests, says it is live, and its
# last-requests rows are the server's; and a screenshot
CHROME=$(command -v chromium-headless-shell || command -v chromium || true)
if [ -n "$CHROME" ]; then
  timeout 120 "$CHROME" --headless --no-sandbox --disable-gpu --virtual-time-budget=5000 --dump-dom "$URL/dashboard" \
    >"$TMP/dom.html" 2>/dev/null
  check "in Chromium the page goes live and shows the server's last requests" python3 - "$TMP/dom.html" "$TMP/dash.html" <<'PY'
import re, sys
dom, page = open(sys.argv[1]).read(), open(sys.argv[2]).read()
assert re.search(r'<span id="live">live, every 3 s</span>', dom), re.findall(r'<span id="live">[^<]*', dom)
rows = lambda t: re.findall(r'<tr data-id="[^"]*">.*?</tr>', re.search(r'<tbody id="recent-rows">(.*?)</tbody>', t, re.S)[1])
assert rows(dom) == rows(page) and len(rows(dom)) == 4, (rows(dom), rows(page))
PY
  timeout 120 "$CHROME" --headless --no-sandbox --disable-gpu --virtual-time-budget=5000 --window-size=1300,1000 \
    --screenshot="$TMP/dashboard.png" "$URL/dashboard" >/dev/null 2>&1
  check "... and takes a screenshot" bash -c "head -c 8 '$TMP/dashboard.png' | grep -q PNG"
else
  echo "SKIP part: no headless Chromium (chromium-headless-shell or chromium): the in-browser check"
fi
# a stream its client leaves: when it was cut short, its cancel line names the request id
curl -s -N -m 0.3 -H 'Content-Type: application/json' -H 'X-Request-Id: cancel-1' -o /dev/null \
  -d '{"prompt": "hello there", "max_tokens": 4000, "stream": true, "ignore_eos": true}' "$URL/v1/completions"
check "a stream left by its client: complete false, and its cancel line has request_id" python3 - "$LOG" <<'PY'
import json, sys, time
for _ in range(100):  # the access and cancel lines come once the engine notices
    ds = [json.loads(l) for l in open(sys.argv[1])]
    acc = [d for d in ds if d["msg"] == "access" and d["request_id"] == "cancel-1"]
    c = [d for d in ds if "cancelled by its client" in d["msg"]]
    if acc and (acc[0]["complete"] or c): break
    time.sleep(0.1)
assert len(acc) == 1, acc
if not acc[0]["complete"]:
    assert len(c) == 1 and c[0]["request_id"] == "cancel-1" and c[0]["completion_id"].startswith("cmpl-"), c
PY
# a long prefill logs its start and end with the request's id
python3 -c "import json; print(json.dumps({'prompt': [(i * 37) % 700 + 5 for i in range(600)], 'max_tokens': 2}))" >"$TMP/long.json"
curl -s -m 60 -H 'Content-Type: application/json' -H 'X-Request-Id: long-1' -o /dev/null -d @"$TMP/long.json" \
  "$URL/v1/completions"
check "a long prefill logs its start and end with request_id and token counts as numbers" python3 - "$LOG" <<'PY'
import json, sys
p = [d for d in map(json.loads, open(sys.argv[1])) if d["msg"].startswith("serve: prefill long-1:")]
assert len(p) == 2, p
assert p[0]["request_id"] == "long-1" and p[0]["computed_tokens"] + p[0]["cached_tokens"] == 600, p[0]
assert p[1]["request_id"] == "long-1" and isinstance(p[1]["seconds"], float), p[1]
assert isinstance(p[1]["tokens_per_s"], float) and p[1]["tokens_per_s"] > 0, p[1]
PY
stop
check "graceful stop exits 0" test $? -eq 0
check "the close wrote an index checkpoint" test -f "$TMP/kv/index"
check "the stop logs the signal and the flush's seconds as keys" python3 - "$LOG" <<'PY'
import json, sys
ds = [json.loads(l) for l in open(sys.argv[1])]
assert any(d.get("signal") == "SIGTERM" for d in ds), ds[-3:]
f = [d for d in ds if d["msg"].startswith("serve: flushed the KV cache")]
assert len(f) == 1 and isinstance(f[0]["seconds"], float) and f[0]["to"].endswith("/kv"), f
PY
# the servers below log JSON too, and every line of every one is checked at the end
KVT_SERVE_ARGS+=(--log-format json)

# ---- restart: the index comes from the checkpoint ------------------------------------------------
start b "$TMP/b.log" --kv-disk "$TMP/kv" --kv-disk-size 64M --restore always
check "the restart loaded the index from the checkpoint" grep -Eq 'disk tier .*: [1-9][0-9]* records in [0-9]+ segments \([1-9][0-9]* from the index checkpoint, 0.0 MiB of headers scanned\)' "$TMP/b.log"
ask "$URL" "$PROMPT" "$TMP/r2.json"
check "the prompt comes from disk after the restart (T2 $(t2_of "$TMP/r2.json"))" test "$(t2_of "$TMP/r2.json")" -gt 0
check "... with the same completion" test "$(text_of "$TMP/r1.json")" = "$(text_of "$TMP/r2.json")"
stop

# ---- kill -9 after periodic checkpoints: nothing is lost --------------------------------------------
P2="Another fixed preamble for a second service, long enough to fill several blocks of tokens, and then a question"
KVT_DISK_CHECKPOINT_S=0.05 start c "$TMP/c.log" --kv-disk "$TMP/kv" --kv-disk-size 64M --write-through \
  --kv-disk-admit-all --restore always
touch "$TMP/before-r3"
ask "$URL" "$P2" "$TMP/r3.json"
curl -s -m 30 -X POST "$URL/v1/cache/flush" -o /dev/null
# a put checkpoints the index (with r3's records) once the checkpoint interval (0.05 s) has
# passed since the last put tried: poll the age of a marker left after r3's puts ended
touch "$TMP/after-r3"
aged() { python3 -c 'import os,sys,time; sys.exit(time.time() - os.stat(sys.argv[1]).st_mtime <= 0.1)' "$TMP/after-r3"; }
for _ in $(seq 200); do aged && break; sleep 0.02; done
P4="A third text that shares nothing with the others and is long enough to fill a whole block of thirty-two tokens by itself"
ask "$URL" "$P4" "$TMP/r4.json" # its new blocks' puts write the due checkpoint
newer_ckpt() { [ -n "$(find "$TMP/kv/index" -newer "$TMP/before-r3" 2>/dev/null)" ]; } # nanosecond mtimes
for _ in $(seq 300); do newer_ckpt && break; sleep 0.05; done
check "a periodic index checkpoint was written after r3" newer_ckpt
curl -s -m 30 -X POST "$URL/v1/cache/flush" -o /dev/null
kvt_stop_server c KILL
start d "$TMP/d.log" --kv-disk "$TMP/kv" --kv-disk-size 64M --restore always
check "after kill -9 the disk tier opens" grep -Eq 'disk tier .*: [1-9][0-9]* records in' "$TMP/d.log"
check "... without corrupt records" bash -c "! grep -qi 'corrupt' '$TMP/d.log'"
for pair in "$PROMPT:r1" "$P2:r3"; do
  p=${pair%:*} ref=${pair##*:}
  ask "$URL" "$p" "$TMP/after.json"
  check "after kill -9: $ref's prompt from disk (T2 $(t2_of "$TMP/after.json"))" test "$(t2_of "$TMP/after.json")" -gt 0
  check "... with the same completion" test "$(text_of "$TMP/$ref.json")" = "$(text_of "$TMP/after.json")"
done
stop

# ---- /dashboard is behind the keys that guard /metrics ----------------------------------------------
start e "$TMP/e.log" --api-key k1
AUTH=(-H 'Authorization: Bearer k1')
check "/dashboard needs the key when keys are set" test "$(curl -s -m 10 -o /dev/null -w '%{http_code}' "$URL/dashboard")" = 401
check "... and opens with it" test "$(curl -s -m 10 "${AUTH[@]}" -o /dev/null -w '%{http_code}' "$URL/dashboard")" = 200
stop

# ---- every JSON line of every server above: typed keys, request ids --------------------------------
check "every JSON log line carries its figures and request id as typed keys (a, b, c, d, e)" \
  python3 "$HERE/jsonlog_check.py" --min 40 --ids long-1,dash-1,dash-2,cancel-1 "$LOG" "$TMP/b.log" "$TMP/c.log" "$TMP/d.log" "$TMP/e.log"
check "... including the disk tier's open" grep -q '"msg":"disk tier .*records in .*"records":[1-9]' "$TMP/d.log"
# the checker is not vacuous: each broken line is refused
for bad_line in 'kvtier: info: plain text' '{"level":"info","ts":"2026-12-01T00:00:00.000Z","msg":"x"}' \
  '{"ts":"2026-12-01T00:00:00.000Z","level":"info","msg":"serve: 12 tokens"}' \
  '{"ts":"2026-12-01T00:00:00.000Z","level":"info","msg":"serve: 12 tokens","tokens":"12"}' \
  '{"ts":"2026-12-01T00:00:00.000Z","level":"info","msg":"serve: prefill req-1a-2: 3 tokens","tokens":3}' \
  '{"ts":"2026-12-01T00:00:00.000Z","level":"info","msg":"serve: done id=x","id":"x"}' \
  '{"ts":"2026-12-01T00:00:00.000Z","level":"info","msg":"serve: 1.25 s","seconds":1.5}'; do
  printf '%s\n' "$bad_line" >"$TMP/bad.jsonl"
  check "jsonlog_check refuses: $bad_line" bash -c "! python3 '$HERE/jsonlog_check.py' '$TMP/bad.jsonl' >/dev/null"
done
printf '%s\n' '{"ts":"2026-12-01T00:00:00.000Z","level":"info","msg":"serve: prefill req-1a-2: 3 tokens in 1.25 s","request_id":"req-1a-2","tokens":3,"seconds":1.2512}' >"$TMP/good.jsonl"
check "... and passes a good one" python3 "$HERE/jsonlog_check.py" "$TMP/good.jsonl"

echo "test_server_ops: $pass passed, $fail failed"
[ "$fail" -gt 0 ] && exit 1
[ "$skipped" -gt 0 ] && exit 77
exit 0
