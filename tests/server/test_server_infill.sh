#!/usr/bin/env bash
# llama-server's /infill (code completion: the code before and after the
# cursor, and other files as context) and the code-completion limits
# n_indent and t_max_predict_ms, over loopback:
# - the fill-in-the-middle prompt is llama-server's, token for token: the
#   repository line and a file line per extra chunk where the vocabulary has
#   those tokens (mkmodel --fim: Qwen2.5-Coder's), the "--- snippet ---" line
#   where it has not (DeepSeek Coder's vocabulary), extras before BOS, the
#   prefix's last 3/4 of a 2,048-token batch, the suffix's first quarter less
#   the prompt, the extras' last tokens the context leaves; --spm-infill
#   writes the suffix first; mixed arrays of text and ids;
# - OpenAI's suffix on /v1/completions: the prompt and suffix whole, as the
#   ids /completion would be given for that layout;
# - a model without FIM tokens is a 501, bad fields 400s naming them;
# - a second request with another suffix reuses the cached extras and prefix,
#   and greedy output with that hit equals a cold run's; streamed text joins
#   to the whole answer;
# - n_indent ends the reply before a later line indented less (what an
#   independent scan of the uncut reply predicts, byte and token), also on
#   /v1/completions; t_max_predict_ms ends it once a line has ended.
# The --fim model's vocabulary has one token per byte, so text lengths are
# token counts. Needs curl, jq and python3.
set -u
command -v curl >/dev/null && command -v jq >/dev/null && command -v python3 >/dev/null ||
  { echo "SKIP: needs curl, jq and python3"; exit 77; }
. "$(dirname "$0")/../testutil.sh"
KVT_SERVE_ARGS=(--host 127.0.0.1 -t 1)
SMALL=(--dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128)
"$BIN" mkmodel -o "$TMP/fim.gguf" --fim "${SMALL[@]}" >/dev/null 2>&1 || { echo "mkmodel failed"; exit 1; }
"$BIN" mkmodel -o "$TMP/plain.gguf" "${SMALL[@]}" >/dev/null 2>&1 || { echo "mkmodel failed"; exit 1; }
# rep STR N: STR N times
rep() { python3 -c 'import sys; print(sys.argv[1] * int(sys.argv[2]), end="")' "$1" "$2"; }

# ---- a model without FIM tokens ------------------------------------------------------------------
kvt_start_server plain -m "$TMP/plain.gguf" -c 512
post /infill '{"input_prefix": "a", "input_suffix": "b"}'
check "a vocabulary without FIM tokens: 501" is "$CODE" 501
check "... naming the three it lacks" \
  grep -q 'no fill-in-the-middle prefix, suffix, middle token' "$TMP/body"
post /v1/completions '{"prompt": "a", "suffix": "b", "max_tokens": 1}'
check "... and so is a /v1/completions suffix" is "$CODE" 501
kvt_stop_server plain

# ---- the layout ------------------------------------------------------------------------------------
kvt_start_server fim -m "$TMP/fim.gguf" -c 4096
X='[{"filename": "a.py", "text": "x=1\n"}, {"text": "y"}]'
post /infill "{\"input_prefix\": \"def f():\\n    \", \"input_suffix\": \"\\nf()\\n\", \"input_extra\": $X,
  \"prompt\": \"ret\", \"n_predict\": 4, \"temperature\": 0}"
check "/infill: 200" is "$CODE" 200
WANT='<|repo_name|>myproject\n<|file_sep|>a.py\nx=1\n<|file_sep|>tmp\ny<|file_sep|>filename\n<|endoftext|>'
WANT+='<|fim_prefix|>def f():\n    ret<|fim_suffix|>\nf()\n<|fim_middle|>'
check "the repository-level FIM prompt, extras before BOS (a file without a name is tmp)" \
  is "$(jb -c .prompt)" "\"$WANT\""
check "... $(jb .tokens_evaluated) tokens: one a byte, one a special" is "$(jb .tokens_evaluated)" 62
check "... the answer is /completion's (stop_type, tokens_predicted)" \
  is "$(jb '[.stop_type, .tokens_predicted] | @text')" '["limit",4]'
post /infill '{"input_prefix": ["ab", 10, "c"], "input_suffix": [], "n_predict": 1}'
check "a mixed array of text and ids (and the file line, which comes without extras too)" is "$(jb -c .prompt)" \
  '"<|repo_name|>myproject\n<|file_sep|>filename\n<|endoftext|><|fim_prefix|>ab\nc<|fim_suffix|><|fim_middle|>"'
# the budget: prefix 1536 = 3/4 of the batch, suffix 512 - 2 - prompt, extras 4096 - 2048 + 2 (no -n) but
# for a token to generate (2045)
post /infill "{\"input_prefix\": \"$(rep a 2000)END\", \"input_suffix\": \"BEG$(rep b 1000)\",
  \"input_extra\": [{\"filename\": \"f\", \"text\": \"$(rep c 3000)\"}], \"prompt\": \"pq\", \"n_predict\": 1}"
WANT="$(rep c 2035)<|file_sep|>filename"$'\n'"<|endoftext|><|fim_prefix|>$(rep a 1533)ENDpq<|fim_suffix|>BEG$(rep b 505)<|fim_middle|>"
check "prefix, suffix and extras (their last 2,045 tokens) trimmed to llama-server's shares" is "$(jb .prompt)" "$WANT"

# ---- reuse: another suffix keeps the extras and the prefix; warm equals cold --------------------------
BODY() { echo "{\"input_prefix\": \"$(rep 'def g(x):\n    return x\n' 30)def f():\\n    \",
  \"input_suffix\": \"$1\", \"input_extra\": [{\"filename\": \"u.py\", \"text\": \"$(rep 'import os\n' 20)\"}],
  \"n_predict\": 12, \"temperature\": 0 $2}"; }
post /infill "$(BODY '\nf()' '')"
post /infill "$(BODY '\nf(2)' '')"
WARM=$(jb .content)
check "another suffix reuses the extras and the prefix ($(jb .timings.cache_n) cached)" \
  gt "$(jb .timings.cache_n)" 800
post /infill "$(BODY '\nf(2)' ', "cache_salt": "cold"')"
check "... and greedy output with that hit equals a cold run's" is "$WARM" "$(jb .content)"
check "... (which was cold)" is "$(jb .timings.cache_n)" 0
curl -s -m 60 -N "$URL/infill" -d "$(BODY '\nf(2)' ', "stream": true')" >"$TMP/sse"
check "streamed, the pieces join to the same text" \
  is "$(sed -n 's/^data: //p' "$TMP/sse" | grep -v '^\[DONE\]' | jq -rj '.content // empty')" "$WARM"

# ---- what llama.vim sends: the infill sampler, response_fields, t_max_prompt_ms ----------------------
post /infill '{"input_prefix": "# hello world in go\n", "input_suffix": "\n", "input_extra": [], "prompt": "func",
  "n_predict": 16, "stop": [], "n_indent": 2, "top_k": 40, "top_p": 0.90, "stream": false,
  "samplers": ["top_k", "top_p", "infill"], "cache_prompt": true, "t_max_prompt_ms": 500, "t_max_predict_ms": 1000,
  "response_fields": ["content", "timings/prompt_n", "timings/predicted_n", "truncated", "tokens_cached", "no/such"]}'
check "llama.vim's request: 200, the answer only the fields it asks, by path" \
  is "$CODE $(jb -c 'keys')" '200 ["content","timings/predicted_n","timings/prompt_n","tokens_cached","truncated"]'
check "... (a prompt of $(jb '.["timings/prompt_n"]') tokens)" gt "$(jb '.["timings/prompt_n"]')" 20
post /infill '{"input_prefix": "a", "input_suffix": "b", "response_fields": "content"}'
check "response_fields not an array: a 400 naming it" is "$CODE $(jb .error.param)" "400 response_fields"

# ---- OpenAI's suffix on /v1/completions: the prompt and suffix whole, no extra context ---------------
post /v1/completions '{"prompt": "def f():\n    ", "suffix": "\nf()\n", "max_tokens": 6, "temperature": 0}'
SUFFIXED=$(jb -c '.choices[0].text')
check "/v1/completions with a suffix: BOS, PRE, 13, SUF, 5, MID: 22 prompt tokens" is "$(jb .usage.prompt_tokens)" 22
post /tokenize '{"content": "<|fim_prefix|>def f():\n    <|fim_suffix|>\nf()\n<|fim_middle|>", "add_special": true, "parse_special": true}'
post /completion "{\"prompt\": $(jb -c .tokens), \"n_predict\": 6, \"temperature\": 0}"
check "... the text /completion gives for those ids" is "$(jb -c .content)" "$SUFFIXED"
post /v1/completions '{"prompt": ["a", "b"], "suffix": "x", "max_tokens": 1}'
check "... a prompt array with a suffix: a 400 naming suffix" is "$CODE $(jb .error.param)" "400 suffix"
post /v1/completions '{"prompt": "a", "suffix": "x", "echo": true, "max_tokens": 1}'
check "... echo with a suffix: a 400 naming echo" is "$CODE $(jb .error.param)" "400 echo"

# ---- bad requests ------------------------------------------------------------------------------------
post /infill '{"input_suffix": "b"}'
check "no input_prefix: a 400 naming it" is "$CODE $(jb .error.param)" "400 input_prefix"
post /infill '{"input_prefix": "a", "input_suffix": 3}'
check "input_suffix a number: a 400 naming it" is "$CODE $(jb .error.param)" "400 input_suffix"
post /infill '{"input_prefix": "a", "input_suffix": "b", "input_extra": {"text": "c"}}'
check "input_extra not an array: a 400 naming it" is "$CODE $(jb .error.param)" "400 input_extra"
post /infill '{"input_prefix": "a", "input_suffix": "b", "input_extra": [{"filename": "c"}]}'
check "a chunk without text: a 400 naming it" is "$CODE $(jb .error.param)" "400 input_extra[0].text"
post /infill '{"input_prefix": [1, 1e9], "input_suffix": "b"}'
check "an id outside the vocabulary: a 400" is "$CODE $(jb .error.param)" "400 input_prefix"
post /infill '{"input_prefix": "a", "input_suffix": "b", "prompt": [1, 2]}'
check "a prompt that is not text: a 400 naming it" is "$CODE $(jb .error.param)" "400 prompt"
post /infill '{"input_prefix": "a", "input_suffix": "b", "n_indent": "x"}'
check "n_indent not a number: a 400 naming it" is "$CODE $(jb .error.param)" "400 n_indent"

# ---- n_indent and t_max_predict_ms ---------------------------------------------------------------------
# sampled among newline (10), space (32) and x (120) only, so lines and indents come often
GEN='"prompt": "hello", "n_predict": 60, "seed": 21, "temperature": 1, "logit_bias": {"10": 40, "32": 42, "120": 41}'
post /completion "{$GEN}"
UNCUT=$(jb -c .content)
FIRST_NL=$(jq -r 'index("\n")' <<<"$UNCUT")
check "the uncut reply has lines, the first ending early (at $FIRST_NL)" \
  test "$(jq -r '[splits("\n")] | length' <<<"$UNCUT")" -gt 3 -a "$FIRST_NL" -ge 0 -a "$FIRST_NL" -lt 50
# where n_indent N cuts: the first line after a newline whose first byte other than space and tab comes
# after fewer than N of them
# (stdin: the uncut reply as JSON); prints that byte, or -1, and the reply up to it as JSON
cut_at() {
  python3 -c '
import json, sys
t, n = json.load(sys.stdin), int(sys.argv[1])
i, at = t.find("\n"), -1
while i >= 0 and at < 0:
    q = i + 1
    while q < len(t) and t[q] in " \t": q += 1
    if q < len(t) and q - i - 1 < n: at = q
    i = t.find("\n", i + 1)
print(at, json.dumps(t[:at] if at >= 0 else t))' "$1" <<<"$UNCUT"
}
for n in 1 2 3; do
  read -r at want <<<"$(cut_at "$n")"
  post /completion "{$GEN, \"n_indent\": $n}"
  if [ "$at" -ge 0 ]; then
    check "n_indent $n: the reply ends at byte $at, before the first line indented less" is "$(jb -c .content)" "$want"
    check "... after $((at + 1)) tokens, a limit stop" is "$(jb '[.tokens_predicted, .stop_type] | @text')" "[$((at + 1)),\"limit\"]"
  else
    check "n_indent $n: no line is indented less, the reply is whole" is "$(jb -c .content)" "$UNCUT"
  fi
done
post /v1/completions "{$GEN, \"n_indent\": 2}"
read -r at want <<<"$(cut_at 2)"
check "/v1/completions takes n_indent too" is "$(jb -c '.choices[0].text')" "$want"
check "... finish_reason length" is "$(jb '.choices[0].finish_reason')" length
post /completion "{$GEN, \"t_max_predict_ms\": 1}"
check "t_max_predict_ms 1: the reply ends once a line has ended (after $(jb .tokens_predicted) tokens)" \
  is "$(jb '[.stop_type, (.content | contains("\n")), .tokens_predicted < 60] | @text')" '["limit",true,true]'
check "... and is the uncut reply's beginning" is "$(jq -c --argjson u "$UNCUT" '$u[0:(.content | length)]' "$TMP/body")" \
  "$(jb -c .content)"
kvt_stop_server fim

kvt_start_server spm -m "$TMP/fim.gguf" -c 512 --spm-infill
post /infill '{"input_prefix": "p", "input_suffix": "s", "prompt": "q", "n_predict": 1}'
check "--spm-infill: the suffix first" is "$(jb -c .prompt)" '"<|endoftext|><|fim_suffix|>s<|fim_prefix|>pq<|fim_middle|>"'
post /infill "{\"input_prefix\": \"$(rep a 1000)\", \"input_suffix\": \"$(rep b 300)\", \"n_predict\": 1}"
check "a context of 512 that cannot hold llama-server's shares: the prefix's start goes, 511 tokens fed" \
  is "$(jb .prompt)" "<|endoftext|><|fim_suffix|>$(rep b 300)<|fim_prefix|>$(rep a 207)<|fim_middle|>"
kvt_stop_server spm

# ---- DeepSeek Coder's vocabulary: FIM tokens found by their text, no file tokens --------------------
DS=${KVT_SHARED:-../shared}/vocab/ggml-vocab-deepseek-coder.gguf
if [ -f "$DS" ]; then
  "$BIN" mkmodel -o "$TMP/ds.gguf" --vocab-from "$DS" "${SMALL[@]}" >/dev/null 2>&1 || { echo "mkmodel failed"; exit 1; }
  kvt_start_server ds -m "$TMP/ds.gguf" -c 4096
  post /infill '{"input_prefix": "def f():", "input_suffix": "\nf()", "input_extra": [{"filename": "a", "text": "import os"}], "n_predict": 1}'
  check "DeepSeek Coder: the snippet line before each extra chunk, then BOS and its own FIM tokens" \
    is "$(jb -c .prompt)" '"\n\n--- snippet ---\n\nimport os<｜begin▁of▁sentence｜><｜fim▁begin｜>def f():<｜fim▁hole｜>\nf()<｜fim▁end｜>"'
  kvt_stop_server ds
else
  kvt_test_skip_part "no $DS: DeepSeek Coder's FIM layout was not checked"
fi


kvt_test_done test_server_infill
