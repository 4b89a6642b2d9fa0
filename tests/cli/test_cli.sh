#!/usr/bin/env bash
# The kvtier CLI: help for every command, clear errors and exit codes for bad
# usage and bad files, mkmodel -> info round trip.
set -u
. "${KVT_SRC:?KVT_SRC must point to the source tree}/tests/testutil.sh"
is_same() { [ "$1" = "$2" ] || { echo "  got '$2', want '$1'" >&2; return 1; }; }
is_json_cause() { [ "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["causes"][0]["cause"])' "$TMP/out")" = reordered ]; }
docs_reused() { local c; c=$(grep -o '\[2/2\] prompt [0-9]* tokens: cached [0-9]*' "$TMP/out" | awk '{print $NF}'); [ "${c:-0}" -ge 48 ] || { echo "  cached '$c'" >&2; return 1; }; }
has() { grep -q -- "$1" "$TMP/out" || { echo "  output lacks '$1':" >&2; head -5 "$TMP/out" >&2; return 1; }; }

check "top-level help" expect_rc 0 "$BIN" --help
for cmd in run eval info tokenize mkmodel quantize; do
  check "help lists $cmd" has "$cmd"
done
check "the manual has kvtier quantize" bash -c "'$BIN' --man | grep -q '^\\.SS \"kvtier quantize\"'"
check "version" expect_rc 0 "$BIN" --version
check "no args is a usage error" expect_rc 2 "$BIN"
check "unknown command" expect_rc 2 "$BIN" frobnicate
check "unknown command named" has "frobnicate"

check "mkmodel help" expect_rc 0 "$BIN" mkmodel --help
for flag in --output --arch --dim --layers --heads --kv-heads --ff --vocab --ctx --type --vocab-from --tied --outliers --rope-base --swa --seed --name --head-dim \
  --rope-scaling --rope-factor --rope-orig-ctx --rope-attn-factor --rope-yarn-log-mul; do
  check "mkmodel help explains $flag" has "$flag"
done
check "mkmodel without -o" expect_rc 2 "$BIN" mkmodel
check "mkmodel bad type" expect_rc 2 "$BIN" mkmodel -o "$TMP/x.gguf" --type iq3_s
check "mkmodel bad number" expect_rc 2 "$BIN" mkmodel -o "$TMP/x.gguf" --dim abc
check "mkmodel unknown option" expect_rc 2 "$BIN" mkmodel -o "$TMP/x.gguf" --bogus
check "mkmodel bad shape" expect_rc 1 "$BIN" mkmodel -o "$TMP/x.gguf" --dim 60 --heads 7
check "mkmodel bad shape explained" has "multiple"
# --head-dim: q wider than dim (as Qwen3, Gemma) needs no dim % heads; the file says its head width
check "mkmodel --head-dim writes" expect_rc 0 "$BIN" mkmodel -o "$TMP/hd.gguf" --dim 64 --layers 1 --heads 3 --kv-heads 1 \
  --head-dim 32 --ff 128 --vocab 512
check "... info reads the head width" bash -c "'$BIN' info -m '$TMP/hd.gguf' --json | grep -q '\"head_dim\": *32'"
check "mkmodel odd --head-dim" expect_rc 1 "$BIN" mkmodel -o "$TMP/x.gguf" --dim 64 --heads 4 --head-dim 15
check "... explained" has "even"
check "mkmodel --head-dim too wide" expect_rc 1 "$BIN" mkmodel -o "$TMP/x.gguf" --dim 64 --heads 4 --head-dim 8192
check "... names the flag" has "--head-dim"
check "mkmodel q8_0 with a q width not a multiple of 32" expect_rc 1 "$BIN" mkmodel -o "$TMP/x.gguf" --dim 64 --kv-heads 1 \
  --heads 3 --head-dim 10 --type q8_0
check "... explained" has "heads x head dim"
check "mkmodel writes" expect_rc 0 "$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 --vocab 512
check "mkmodel says random" has "random"
# --outliers: the same seed, the same bytes and channels; only the planted rows differ from the plain model
O=(mkmodel --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 --vocab 512 --outliers)
check "mkmodel --outliers writes" expect_rc 0 "$BIN" "${O[@]}" -o "$TMP/o1.gguf"
check "... naming the channels" has "massive activations in channels"
"$BIN" "${O[@]}" -o "$TMP/o2.gguf" 2>/dev/null
check "... the same bytes for the same seed" cmp -s "$TMP/o1.gguf" "$TMP/o2.gguf"
check "... other bytes than without it" bash -c "! cmp -s '$TMP/o1.gguf' '$TMP/m.gguf'"
check "... and the same size" is "$(wc -c <"$TMP/o1.gguf")" "$(wc -c <"$TMP/m.gguf")"
check "an outlier model runs" expect_rc 0 "$BIN" run -m "$TMP/o1.gguf" -p "hello" -n 4 -t 2 --temp 0
# K-quant mix: rows of 256 take the recipe's types; rows of 320 (not of 256) fall back as
# in llama.cpp (Q4_K to Q5_0)
check "mkmodel q4_k_m" expect_rc 0 "$BIN" mkmodel -o "$TMP/k.gguf" --dim 256 --layers 2 --heads 4 --kv-heads 2 --ff 512 --vocab 512 --type q4_k_m
check "q4_k_m info" expect_rc 0 "$BIN" info -m "$TMP/k.gguf"
check "q4_k_m types" has "Q4_K x 13, Q6_K x 3"
check "q4_k_m runs" expect_rc 0 "$BIN" run -m "$TMP/k.gguf" -p "hello" -n 4 -t 2
check "mkmodel q4_k fallback" expect_rc 0 "$BIN" mkmodel -o "$TMP/k.gguf" --dim 320 --layers 1 --heads 5 --kv-heads 5 --ff 640 --vocab 512 --type q4_k
check "q4_k fallback info" expect_rc 0 "$BIN" info -m "$TMP/k.gguf"
check "q4_k fallback is q5_0" has "Q5_0 x 9"
check "q4_k fallback runs" expect_rc 0 "$BIN" run -m "$TMP/k.gguf" -p "hello" -n 4 -t 2
check "q4_k fallback runs" expect_rc 0 "$BIN" run -m "$TMP/k.gguf" -p "hello" -n 4 -t 2
# rope scaling: mkmodel writes YaRN keys, info shows them, a context past the covered one warns
Y=(mkmodel --dim 64 --layers 1 --heads 4 --kv-heads 2 --ff 128 --vocab 512 --ctx 256)
check "mkmodel refuses an unknown --rope-scaling" expect_rc 1 "$BIN" "${Y[@]}" -o "$TMP/y.gguf" --rope-scaling ntk
check "... naming the flag" has "--rope-scaling must be none, linear or yarn"
check "mkmodel --rope-scaling yarn" expect_rc 0 "$BIN" "${Y[@]}" -o "$TMP/y.gguf" --rope-scaling yarn --rope-factor 4 \
  --rope-orig-ctx 128
check "info shows yarn" expect_rc 0 "$BIN" info -m "$TMP/y.gguf"
check "... its factor and original context" has "rope scaling   yarn, factor 4 from an original context of 128"
check "a yarn model runs within its 512 tokens, no warning" expect_rc 0 "$BIN" run -m "$TMP/y.gguf" -p "hello" -n 2 -t 2 \
  --temp 0 --ctx 512
check "... no warning" bash -c "! grep -q 'exceeds the' '$TMP/out'"
check "past them it runs" expect_rc 0 "$BIN" run -m "$TMP/y.gguf" -p "hello" -n 2 -t 2 --temp 0 --ctx 1024
check "... with a warning" has "context 1024 tokens exceeds the 512 this model covers"
check "an unscaled model past its trained context runs" expect_rc 0 "$BIN" run -m "$TMP/m.gguf" -p "hello" -n 2 -t 2 \
  --temp 0 --ctx 8192
check "... with a warning naming context_length" has "exceeds the 4096 this model was trained for (llama.context_length)"

# a tier budget too small for one block is refused at start, naming the flag and, in the flag's
# units, the smallest budget that holds one; that budget is then accepted
least() { sed -n 's/.*give at least \([0-9]*[KM]*\).*/\1/p' "$TMP/out" | head -1; }
check "run --kv-ram 1 is refused" expect_rc 1 "$BIN" run -m "$TMP/m.gguf" -p hello -n 1 -t 2 --kv-ram 1
check "... naming the flag, a block's cost and the smallest budget" \
  has "--kv-ram 1 bytes holds no KV block: one takes [0-9]* bytes here .*give at least [0-9]*K, or 0 for no RAM tier"
RAM_LEAST=$(least)
check "... which is accepted" expect_rc 0 "$BIN" run -m "$TMP/m.gguf" -p hello -n 1 -t 2 --kv-ram "$RAM_LEAST"
check "serve --kv-ram 1 is refused too" expect_rc 1 timeout 60 "$BIN" serve -m "$TMP/m.gguf" --port 0 -t 1 --kv-ram 1
check "... with the same message" has "--kv-ram 1 bytes holds no KV block"
check "run --kv-active 1 is refused" expect_rc 1 "$BIN" run -m "$TMP/m.gguf" -p hello -n 1 -t 2 --kv-active 1
check "... naming the flag and the smallest budget" has "--kv-active 1 bytes holds no KV page: .*give at least [0-9]*K"
ACTIVE_LEAST=$(least)
check "... which runs a short prompt" expect_rc 0 "$BIN" run -m "$TMP/m.gguf" -p hello -n 1 -t 2 --ctx 512 --kv-active "$(least)"
check "... with a warning that one context does not fit, and what would" \
  has "holds 32 tokens, less than one context of 512 (--ctx-size): .*give at least [0-9]*K for one"
check "... which fits one without a warning" expect_rc 0 "$BIN" run -m "$TMP/m.gguf" -p hello -n 1 -t 2 --ctx 512 \
  --kv-active "$(sed -n 's/.*give at least \([0-9]*[KM]*\) for one.*/\1/p' "$TMP/out" | head -1)"
check "... none" bash -c "! grep -q 'less than one context' '$TMP/out'"
# a server whose pool holds one page: a prompt longer than the pool can never run (a 400 naming
# --kv-active, not a 503 to retry); a reply that fills the pool alone ends as at the context's end
kvt_start_server small -m "$TMP/m.gguf" -t 1 --ctx 512 --parallel 1 --kv-active "$ACTIVE_LEAST"
post /v1/completions "{\"prompt\": \"$(printf 'river %.0s' $(seq 1 40))\", \"max_tokens\": 4}"
check "serve: a prompt longer than the whole pool is a 400" is "$CODE" 400
check "... naming --kv-active" bash -c "jq -r .error.message '$TMP/body' | grep -q -- 'larger --kv-active'"
post /v1/completions '{"prompt": "river", "max_tokens": 200, "temperature": 0, "ignore_eos": true}'
check "... a reply that fills the pool alone is a 200" is "$CODE" 200
check "... that ends with length" is "$(jb '.choices[0].finish_reason')" length
# 32 tokens in the pool's one page, and the token sampled after the last of them
check "... at the pool's size" is "$(jb '.usage.prompt_tokens + .usage.completion_tokens')" 33
kvt_stop_server small
check "run --kv-disk-size 1 is refused" expect_rc 1 "$BIN" run -m "$TMP/m.gguf" -p hello -n 1 -t 2 \
  --kv-disk "$TMP/small-disk" --kv-disk-size 1
check "... naming the flag and the smallest budget" has "--kv-disk-size 1 bytes is too small: .*give at least [0-9]*K"
DISK_LEAST=$(least)
check "... which is accepted" expect_rc 0 "$BIN" run -m "$TMP/m.gguf" -p hello -n 1 -t 2 --kv-disk "$TMP/small-disk" \
  --kv-disk-size "$DISK_LEAST"

check "run --kv-disk '' is refused" expect_rc 1 "$BIN" run -m "$TMP/m.gguf" -p hello -n 1 -t 2 --kv-disk ""
check "... naming the flag" has "--kv-disk: no directory given (the path is empty)"

check "info help" expect_rc 0 "$BIN" info --help
check "info" expect_rc 0 "$BIN" info -m "$TMP/m.gguf"
for field in architecture shapes "weight types" context tokenizer "chat template" fingerprint "bytes/token"; do
  check "info shows $field" has "$field"
done
check "info json" expect_rc 0 "$BIN" info -m "$TMP/m.gguf" --json
check "info json has fingerprint" has '"fingerprint":"'
# every architecture: mkmodel writes it, info names it, its variations and chat template
for spec in qwen3:q/k:chatml gemma2:soft-cap:gemma gemma3:window:gemma phi3:LongRoPE:phi3; do
  IFS=: read -r arch word tmpl <<<"$spec"
  [ "$arch" = qwen3 ] && tmpl=qwen3
  check "mkmodel --arch $arch" expect_rc 0 "$BIN" mkmodel -o "$TMP/$arch.gguf" --arch "$arch" --dim 64 --layers 2 --heads 2 \
    --kv-heads 1 --ff 64 --swa 8
  check "info $arch" expect_rc 0 "$BIN" info -m "$TMP/$arch.gguf"
  check "info names $arch" has "architecture   $arch"
  check "info shows $arch's variations ($word)" has "$word"
  check "info shows $arch's chat template" has "chat template  $tmpl"
done
check "mkmodel unknown arch" expect_rc 1 "$BIN" mkmodel -o "$TMP/x.gguf" --arch mamba
check "mkmodel unknown arch lists the known" has "gemma3"
check "info missing file" expect_rc 1 "$BIN" info -m "$TMP/none.gguf"
check "info missing file named" has "none.gguf"
head -c 1000 "$TMP/m.gguf" > "$TMP/trunc.gguf"
check "info truncated" expect_rc 1 "$BIN" info -m "$TMP/trunc.gguf"
check "info truncated explained" has "trunc"
echo "this is not a model" > "$TMP/text.gguf"
check "info not gguf" expect_rc 1 "$BIN" info -m "$TMP/text.gguf"
check "info not gguf explained" has "not a GGUF"
check "info on a directory" expect_rc 1 "$BIN" info -m "$TMP"
if mkfifo "$TMP/fifo.gguf" 2>/dev/null; then
  # without a writer, opening a FIFO for reading blocks; timeout's 124 would mean a hang
  check "info on a FIFO fails at once" expect_rc 1 timeout 20 "$BIN" info -m "$TMP/fifo.gguf"
  check "info on a FIFO explained" has "not a regular file"
  check "run on a FIFO fails at once" expect_rc 1 timeout 20 "$BIN" run -m "$TMP/fifo.gguf" -p hi -n 1
else
  echo "note: FIFO checks skipped: mkfifo failed" >&2
fi
check "info needs a value" expect_rc 2 "$BIN" info -m

# run -f JSON lines carry the session controls serve has
"$BIN" mkmodel -o "$TMP/s.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 --ctx 512 >/dev/null 2>&1
A="an agent session prompt that is long enough to fill a few cache blocks of thirty two tokens each, so that it is kept"
OTHER="another prompt about something else entirely, also long enough to fill a few cache blocks of thirty two tokens"
cat >"$TMP/s.jsonl" <<JL
{"prompt": "$A", "kvtier": {"session_id": "a", "priority": 2, "keep_warm_s": 600}}
{"prompt": "$OTHER"}
{"action": "pin", "prompt": "$OTHER"}
{"action": "prefetch", "prompt": "$A"}
{"action": "unpin", "prompt": "$OTHER"}
{"action": "end_session", "kvtier": {"session_id": "a"}}
{"action": "end_session", "kvtier": {"session_id": "a"}}
JL
check "run -f with session controls" expect_rc 0 "$BIN" run -m "$TMP/s.gguf" -f "$TMP/s.jsonl" -n 4 --temp 0
check "a pin line pins its cached prefix" has "pin: [1-9][0-9]* of"
check "a prefetch line reports what is resident" has "prefetch: [1-9][0-9]* of"
check "unpin releases" has "unpinned"
check "end_session releases a warm session" has "end_session a: released"
check "a second end_session finds none" has "end_session a: not warm"
# a pin no line releases holds to the end of the run and is released then, before the cache goes
# (under ASan a release after the cache was freed is a use-after-free)
printf '{"prompt": "%s"}\n{"action": "pin", "prompt": "%s"}\n' "$OTHER" "$OTHER" >"$TMP/pin.jsonl"
check "a pin held to the end of run is released cleanly" expect_rc 0 "$BIN" run -m "$TMP/s.gguf" -f "$TMP/pin.jsonl" -n 2 --temp 0
check "... after pinning" has "pin: [1-9][0-9]* of"
printf '{"prompt": "x", "kvtier": {"session": "a"}}\n' >"$TMP/bad.jsonl"
check "an unknown kvtier field is an error" expect_rc 1 "$BIN" run -m "$TMP/s.gguf" -f "$TMP/bad.jsonl"
check "... naming it" has "kvtier.session"
printf '{"prompt": "x", "temprature": 0}\n' >"$TMP/bad.jsonl"
check "an unknown line field is an error" expect_rc 1 "$BIN" run -m "$TMP/s.gguf" -f "$TMP/bad.jsonl"
printf '{"action": "explode", "prompt": "x"}\n' >"$TMP/bad.jsonl"
check "an unknown action is an error" expect_rc 1 "$BIN" run -m "$TMP/s.gguf" -f "$TMP/bad.jsonl"

# Ctrl-C ends a run gracefully (its summary is printed) with status 130, as shells expect.
# The default-size model decodes slowly enough to be caught mid-run.
if "$BIN" mkmodel -o "$TMP/slow.gguf" >/dev/null 2>&1; then
  "$BIN" run -m "$TMP/slow.gguf" -p "count" -n 4000 --ignore-eos -t 1 >"$TMP/run.out" 2>"$TMP/run.err" &
  RUN_PID=$!
  for _ in $(seq 200); do [ -s "$TMP/run.out" ] && break; sleep 0.05; done # generating: the handlers are in place
  kill -INT "$RUN_PID"; wait "$RUN_PID"; RUN_RC=$?
  check "run stopped by SIGINT exits 130 (got $RUN_RC)" test "$RUN_RC" -eq 130
  check "run stopped by SIGINT still prints its summary" grep -q '\[1/1\] prompt' "$TMP/run.err"
fi

# --kv-type: f16|f32|q8_0 on run, eval and serve; q8_0 needs a head_dim that is a multiple of 32
"$BIN" mkmodel -o "$TMP/q.gguf" --dim 128 --layers 2 --heads 4 --kv-heads 2 --ff 256 --ctx 512 --vocab 512 \
  >/dev/null 2>&1
declare -A job=([run]="-p x -n 1" [eval]="--tokens 1 -n 1" [serve]="--port 0")
for cmd in run eval serve; do
  check "$cmd help" expect_rc 0 "$BIN" "$cmd" --help
  check "$cmd help explains --kv-type" has "--kv-type TYPE"
  check "... and q8_0" has "or q8_0"
  check "$cmd help keeps --kv-f32" has "--kv-f32"
  # shellcheck disable=SC2086
  check "$cmd rejects an unknown --kv-type" expect_rc 2 "$BIN" "$cmd" -m "$TMP/q.gguf" --kv-type q4_0 ${job[$cmd]}
  check "... naming it" has "'q4_0'"
  # shellcheck disable=SC2086
  check "$cmd: q8_0 on head_dim 16 fails" expect_rc 1 "$BIN" "$cmd" -m "$TMP/s.gguf" --kv-type q8_0 ${job[$cmd]}
  check "... naming the head_dim" has "head_dim is 16"
done
check "info gives q8_0 bytes per token" expect_rc 0 "$BIN" info -m "$TMP/q.gguf"
check "... 2 layers x 2 kv heads x K,V x 34 bytes" has "272 bytes/token q8_0"
check "info says when q8_0 cannot be used" expect_rc 0 "$BIN" info -m "$TMP/s.gguf"
check "... and why" has "no q8_0 (head_dim 16"
for t in f16 f32 q8_0; do
  check "eval --kv-type $t" expect_rc 0 "$BIN" eval -m "$TMP/q.gguf" --kv-type $t --tokens "1 300 301 302" -n 2
done
check "eval --kv-f32 is --kv-type f32" expect_rc 0 "$BIN" eval -m "$TMP/q.gguf" --kv-f32 --tokens "1 300 301 302" -n 2
# a q8_0 prompt restored from the disk tier by a second process replies exactly as the first
Q="a prompt for the q8_0 cache that is long enough to fill a few blocks of thirty two tokens, twice over, or more"
run_q8() { "$BIN" run -m "$TMP/q.gguf" --kv-type q8_0 -p "$Q" -n 12 --temp 0 --kv-disk "$TMP/q8disk" --restore always; }
check "q8_0 run with a disk tier" expect_rc 0 run_q8
cp "$TMP/out" "$TMP/q8first"
check "q8_0 run again" expect_rc 0 run_q8
check "... reuses its KV from disk" has "T2 [1-9]"
check "... and replies the same" cmp -s <(grep -av "kvtier" "$TMP/q8first") <(grep -av "kvtier" "$TMP/out")
check "f16 on the same disk dir finds no q8_0 KV" expect_rc 0 "$BIN" run -m "$TMP/q.gguf" -p "$Q" -n 1 --temp 0 \
  --kv-disk "$TMP/q8disk" --restore always
check "... cached 0" has "cached 0 "

# ---- the command line a llama.cpp user expects (run and serve) ----------------------------------
M="$TMP/q.gguf"
greedy() { "$BIN" "$@" 2>/dev/null; }
REF=$(greedy run -m "$M" -p "hello there" -n 6 --temp 0 --ctx 128)
check "--opt=value" is_same "$REF" "$(greedy run --model="$M" --prompt="hello there" --n-predict=6 --temp=0 --ctx=128)"
check "-c and --ctx-size are --ctx" is_same "$REF" "$(greedy run -m "$M" -p "hello there" -n 6 --temp 0 -c 128)"
check "--ctx-size" is_same "$REF" "$(greedy run -m "$M" -p "hello there" -n 6 --temp 0 --ctx-size 128)"
check "no command runs run" is_same "$REF" "$(greedy -m "$M" -p "hello there" -n 6 --temp 0 -c 128)"
check "options from the environment" is_same "$REF" \
  "$(KVTIER_MODEL="$M" KVTIER_PROMPT="hello there" KVTIER_N_PREDICT=6 KVTIER_TEMP=0 KVTIER_CTX_SIZE=128 greedy run)"
check "the command line wins over the environment" is_same "$REF" \
  "$(KVTIER_MODEL=/nonexistent.gguf KVTIER_N_PREDICT=1 greedy run -m "$M" -p "hello there" -n 6 --temp 0 -c 128)"
check "-ngl is accepted" expect_rc 0 "$BIN" run -m "$M" -p "hi" -n 1 -ngl 99
check "... with a notice" has "ignored"
check "--n-gpu-layers=N is accepted" expect_rc 0 "$BIN" run -m "$M" -p "hi" -n 1 --n-gpu-layers=99
check "--gpu-memory-fraction on the CPU is accepted" expect_rc 0 "$BIN" run -m "$M" -p "hi" -n 1 --gpu-memory-fraction 0.5
check "... with a notice" has "--gpu-memory-fraction is ignored"
check "a trailing unknown flag is named" expect_rc 2 "$BIN" run -m "$M" -p hi --bogus
check "... as unknown" has "unknown option '--bogus'"
check "serve: unknown flag named" expect_rc 2 "$BIN" serve --frob=1
check "... as unknown" has "unknown option '--frob=1'"
check "a missing value is named" expect_rc 2 "$BIN" serve --port
check "... as needing a value" has "'--port' needs a value"
check "a stray argument is an error" expect_rc 2 "$BIN" run -m "$M" -p hi extra
check "a bad environment value is named" expect_rc 2 env KVTIER_PORT=abc "$BIN" serve -m "$M"
check "... by its variable" has 'KVTIER_PORT'
for cmd in run serve; do
  "$BIN" $cmd --help >"$TMP/help" 2>&1
  for f in --ctx-size -c, --n-predict -n, --n-gpu-layers '$KVTIER_MODEL' '$KVTIER_CTX_SIZE' '$KVTIER_KV_DISK'; do
    check "$cmd --help lists $f" grep -q -- "$f" "$TMP/help"
  done
done
"$BIN" serve --help >"$TMP/help" 2>&1
check "serve --help lists -np" grep -q -- "-np" "$TMP/help"
check "serve --help lists \$KVTIER_PORT" grep -q -- '$KVTIER_PORT' "$TMP/help"
check "serve --help says OPTIONS is 405 without --cors-origin" grep -q -- "OPTIONS is 405" "$TMP/help"

# kvtier lint: a reordered tool list, and the miss explained on run's stats lines
python3 - "$TMP/lint.jsonl" <<'PY'
import json, sys
tools = ["tool get_order(id): returns an order", "tool refund(order): refunds it", "tool search(query): searches help"]
with open(sys.argv[1], "w") as f:
    for i, q in enumerate(["Where is my order?", "Can I get a refund?", "Is there a phone number?"]):
        t = tools if i != 1 else tools[::-1]
        f.write(json.dumps({"messages": [{"role": "system", "content": "You are a support assistant. Answer briefly and follow the policy.\n" + "\n".join(t)}, {"role": "user", "content": q}]}) + "\n")
PY
check "lint help" expect_rc 0 "$BIN" lint --help
check "lint needs a file" expect_rc 2 "$BIN" lint -m "$TMP/m.gguf"
check "lint runs" expect_rc 0 "$BIN" lint -m "$TMP/m.gguf" --block-size 16 "$TMP/lint.jsonl"
check "... finds the reordered tools" has "reordered tools/documents"
check "... advises sorting them" has "sort the tools"
check "lint --json" expect_rc 0 "$BIN" lint -m "$TMP/m.gguf" --block-size 16 --json "$TMP/lint.jsonl"
check "... is JSON with the cause" is_json_cause
printf 'The time is 2026-11-30 09:14:07 and the quick brown fox jumps over the lazy dog.\nThe time is 2026-11-30 09:15:52 and the quick brown fox jumps over the lazy dog.\n' >"$TMP/ts.txt"
check "run explains a miss" expect_rc 0 "$BIN" run -m "$TMP/m.gguf" -f "$TMP/ts.txt" -n 1 --block-size 16
check "... on its stats line" has "reuse stopped: diverged@block"

# documents from run -f: the same two documents before two questions; the second reuses them
printf '%s\n' '{"prompt":"When will my order ship?","kvtier":{"documents":[{"id":"a","text":"The warehouse in Lyon ships orders on Mondays and Thursdays only."},{"id":"b","text":"Refunds go back to the original card within five business days."}]}}' \
  '{"prompt":"Where does my refund go?","kvtier":{"documents":[{"id":"a","text":"The warehouse in Lyon ships orders on Mondays and Thursdays only."},{"id":"b","text":"Refunds go back to the original card within five business days."}]}}' >"$TMP/docs.jsonl"
check "run -f with documents" expect_rc 0 "$BIN" run -m "$TMP/m.gguf" -f "$TMP/docs.jsonl" -n 1 --block-size 16 --temp 0
check "... reuses the document blocks" docs_reused
# JSON lines are checked as the server checks a body: a key twice (which copy counts differs between
# JSON parsers), or a document id twice, is an error naming the line, before anything runs
printf '%s\n' '{"prompt":"hi"}' '{"prompt":"a","prompt":"b"}' >"$TMP/dupkey.jsonl"
check "run -f: a key twice in a line is refused" expect_rc 1 "$BIN" run -m "$TMP/m.gguf" -f "$TMP/dupkey.jsonl" -n 1
check "... naming the line and the key" grep -q "dupkey.jsonl:2: duplicate key 'prompt'" "$TMP/out"
check "... before any prompt ran" bash -c "! grep -q 'prompt .* tokens' '$TMP/out'"
check "lint: the same" expect_rc 1 "$BIN" lint -m "$TMP/m.gguf" "$TMP/dupkey.jsonl"
check "... naming the line and the key" grep -q "dupkey.jsonl:2: duplicate key 'prompt'" "$TMP/out"
printf '%s\n' '{"prompt":"q","kvtier":{"documents":[{"id":"a","text":"x"},{"id":"a","text":"y"}]}}' >"$TMP/dupdoc.jsonl"
check "run -f: a document id twice is refused" expect_rc 1 "$BIN" run -m "$TMP/m.gguf" -f "$TMP/dupdoc.jsonl" -n 1
check "... naming it" grep -q "dupdoc.jsonl:1: 'kvtier.documents\[1\].id' repeats the id" "$TMP/out"
check "--chat-template-kwargs with a key twice is a usage error" expect_rc 2 "$BIN" serve -m "$TMP/m.gguf" \
  --chat-template-kwargs '{"enable_thinking":true,"enable_thinking":false}'
check "... naming the key" grep -q "duplicate key 'enable_thinking'" "$TMP/out"
kvt_test_done test_cli
