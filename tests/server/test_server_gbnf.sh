#!/usr/bin/env bash
# GBNF grammars (llama.cpp's "grammar" field) end to end over loopback on a
# random-weight model, whose output is noise unless the mask constrains it:
# on /v1/chat/completions, /v1/completions and llama-server's /completion,
# over several seeds, every output finishes and matches the grammar (checked
# with python3's re); where one token of max_tokens is left and the text may
# end, the reply ends there with "stop". A bad grammar is a 400 naming the line and column;
# grammar together with response_format or tools is a 400 naming both.
# Needs curl, jq and python3.
set -u
command -v curl >/dev/null && command -v jq >/dev/null && command -v python3 >/dev/null ||
  { echo "SKIP: needs curl, jq and python3"; exit 77; }
. "$(dirname "$0")/../testutil.sh"
has() { grep -q -- "$2" <<<"$1" || { echo "  '$1' lacks '$2'" >&2; return 1; }; }
matches() { python3 -c 'import re, sys; sys.exit(0 if re.fullmatch(sys.argv[1], sys.argv[2]) else 1)' "$1" "$2" ||
  { echo "  '$2' does not match $1" >&2; return 1; }; }

"$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 >/dev/null 2>&1 || { echo "mkmodel failed"; exit 1; }
KVT_SERVE_ARGS=(-m "$TMP/m.gguf" -t 1 -c 1024)
kvt_start_server main -np 2

G=$(jq -Rn --arg g 'root ::= ("yes" | "no") " " [0-9]{1,3}' '$g')
RE='(yes|no) [0-9]{1,3}'
MSG='"messages":[{"role":"user","content":"Answer."}]'
good=0 stopped=0
for seed in $(seq 1 6); do
  post /v1/chat/completions "{$MSG,\"grammar\":$G,\"max_tokens\":30,\"seed\":$seed}"
  [ "$CODE" = 200 ] && [ "$(jb '.choices[0].finish_reason')" = stop ] && stopped=$((stopped + 1))
  [ "$CODE" = 200 ] && matches "$RE" "$(jb '.choices[0].message.content')" && good=$((good + 1))
done
check "chat: 6 of 6 seeds finish" is "$stopped" 6
check "... and 6 of 6 match the grammar" is "$good" 6

good=0
for seed in 1 2 3; do
  post /v1/completions "{\"prompt\":\"Q:\",\"grammar\":$G,\"max_tokens\":30,\"seed\":$seed}"
  [ "$CODE" = 200 ] && matches "$RE" "$(jb '.choices[0].text')" && good=$((good + 1))
  post /completion "{\"prompt\":\"Q:\",\"grammar\":$G,\"n_predict\":30,\"seed\":$seed}"
  [ "$CODE" = 200 ] && matches "$RE" "$(jb '.content')" && good=$((good + 1))
done
check "/v1/completions and /completion: 6 of 6 match" is "$good" 6

ARITH=$(jq -Rn --arg g 'root ::= expr
expr ::= term (("+" | "-") term)*   # sums
term ::= [0-9]{1,2} | "(" expr ")"' '$g')
post /v1/completions "{\"prompt\":\"1+1=\",\"grammar\":$ARITH,\"max_tokens\":40,\"seed\":5}"
check "a multi-line grammar with comments and recursion" is "$CODE/$(jb '.choices[0].finish_reason')" 200/stop
check "... and its output parses as arithmetic" python3 -c 'import re, sys; eval(re.sub(r"[0-9]+", lambda m: str(int(m[0])), sys.argv[1]), {})' "$(jb '.choices[0].text')"

# The last token of max_tokens where the text may end but could go on: only
# end-of-generation is offered, so the reply ends with "stop" and complete text
# rather than "length" one token further (which, were the grammar still open
# there, would leave it cut). Free text that may end after any letter, and a
# JSON schema's top-level integer, on a budget of 3 tokens.
WORDS=$(jq -Rn --arg g 'root ::= [a-z ]+' '$g')
stopped=0 good=0
for seed in 1 2 3 4; do
  post /v1/completions "{\"prompt\":\"w:\",\"grammar\":$WORDS,\"max_tokens\":3,\"seed\":$seed}"
  [ "$CODE" = 200 ] && [ "$(jb '.choices[0].finish_reason')" = stop ] && stopped=$((stopped + 1))
  [ "$CODE" = 200 ] && matches '[a-z ]+' "$(jb '.choices[0].text')" && good=$((good + 1))
done
check "max_tokens 3 where the grammar may end: 4 of 4 end with stop" is "$stopped" 4
check "... and 4 of 4 match the grammar" is "$good" 4
stopped=0
for seed in 1 2 3 4; do
  post /v1/completions "{\"prompt\":\"n:\",\"json_schema\":{\"type\":\"integer\"},\"max_tokens\":3,\"seed\":$seed}"
  [ "$CODE" = 200 ] && [ "$(jb '.choices[0].finish_reason')" = stop ] && matches '\s*-?[0-9]+\s*' "$(jb '.choices[0].text')" &&
    stopped=$((stopped + 1))
done
check "... and a JSON schema's integer, 4 of 4 stop with a number" is "$stopped" 4

# A grammar that matches only "": end-of-generation is the one token it allows, so the reply
# ends at once with "stop" (as llama-server), not with "length" and no token; and one whose text
# is complete and allows nothing more ends with "stop" right after the token that completes it.
EMPTY=$(jq -Rn --arg g 'root ::= ""' '$g')
post /v1/chat/completions "{$MSG,\"grammar\":$EMPTY,\"max_tokens\":8,\"seed\":1}"
check "a grammar of only \"\": chat ends with stop" is "$CODE/$(jb '.choices[0].finish_reason')" 200/stop
check "... with empty content and no completion tokens" is "$(jb '.choices[0].message.content')/$(jb .usage.completion_tokens)" /0
post /v1/completions "{\"prompt\":\"Q:\",\"grammar\":$EMPTY,\"max_tokens\":8}"
check "... /v1/completions ends with stop" is "$CODE/$(jb '.choices[0].finish_reason')/$(jb '.choices[0].text')" 200/stop/
post /completion "{\"prompt\":\"Q:\",\"grammar\":$EMPTY,\"n_predict\":8}"
check "... /completion stops on end-of-generation" is "$CODE/$(jb .stop_type)/$(jb .content)" 200/eos/
curl -s -N -m 60 -H 'Content-Type: application/json' \
  -d "{$MSG,\"grammar\":$EMPTY,\"max_tokens\":8,\"stream\":true}" "$URL/v1/chat/completions" >"$TMP/empty.sse"
check "... streamed, the last choice says stop" is "$(grep '^data: {' "$TMP/empty.sse" | sed 's/^data: //' |
  jq -r '.choices[0].finish_reason // empty' | tail -1)" stop
# ("")+ is the same empty-only grammar; a repetition of an item that may be empty is refused,
# naming the user's rule and the repetition as written rather than a generated rule.
post /v1/completions "{\"prompt\":\"Q:\",\"grammar\":$(jq -Rn --arg g 'root ::= ("")+' '$g'),\"max_tokens\":8}"
check "root ::= (\"\")+ ends at once with stop" is "$CODE/$(jb '.choices[0].finish_reason')/$(jb '.choices[0].text')/$(jb .usage.completion_tokens)" 200/stop//0
post /v1/completions "{\"prompt\":\"Q:\",\"grammar\":$(jq -Rn --arg g 'root ::= ("a"?)+' '$g'),\"max_tokens\":8}"
check "root ::= (\"a\"?)+ is a 400 on 'grammar'" is "$CODE/$(jb .error.param)" 400/grammar
check "... naming root and the repetition" has "$(jb .error.message)" "rule 'root': '(\"a\"?)+' repeats an item that can match the empty string"
OPT=$(jq -Rn --arg g 'root ::= ("yes" | "no")?' '$g')
post /v1/completions "{\"prompt\":\"Q:\",\"grammar\":$OPT,\"max_tokens\":8,\"seed\":3}"
check "an optional grammar ends with stop" is "$CODE/$(jb '.choices[0].finish_reason')" 200/stop
check "... and its text matches it" matches '(yes|no)?' "$(jb '.choices[0].text')"
stopped=0
for seed in 1 2 3; do
  post /v1/completions "{\"prompt\":\"Q:\",\"grammar\":$(jq -Rn --arg g 'root ::= "yes" | "no"' '$g'),\"max_tokens\":8,\"seed\":$seed}"
  [ "$CODE" = 200 ] && [ "$(jb '.choices[0].finish_reason')" = stop ] && matches '(yes|no)' "$(jb '.choices[0].text')" &&
    stopped=$((stopped + 1))
done
check "a grammar complete after its text: 3 of 3 stop with it" is "$stopped" 3

post /v1/chat/completions "{$MSG,\"grammar\":\"root ::= \\\"a\\\" (\\\"b\\\" | item\"}"
check "an unbalanced paren is a 400 on 'grammar'" is "$CODE/$(jb .error.param)" 400/grammar
check "... naming the line and column" has "$(jb .error.message)" "line 1, column 14: '(' is not closed"
post /completion "{\"prompt\":\"x\",\"grammar\":\"root ::= item\"}"
check "an undefined rule is a 400 naming it" has "$CODE $(jb .error.message)" "400 .*line 1, column 10: undefined rule 'item'"
post /v1/chat/completions "{$MSG,\"grammar\":\"root ::= x\\nx ::= x \\\"1\\\" | \\\"2\\\"\"}"
check "left recursion is a 400 naming the rule" has "$CODE $(jb .error.message)" "400 .*rule 'x' is left-recursive"
post /v1/chat/completions "{$MSG,\"grammar\":$G,\"response_format\":{\"type\":\"json_object\"}}"
check "grammar with response_format is a 400 naming both" has "$CODE $(jb .error.message)" "400 .*'grammar' or a JSON 'response_format'"
post /v1/completions "{\"prompt\":\"x\",\"grammar\":$G,\"json_schema\":{\"type\":\"object\"}}"
check "grammar with json_schema is a 400 naming both" has "$CODE $(jb .error.message)" "400 .*'grammar' or a JSON 'response_format' / 'json_schema'"
post /v1/chat/completions "{$MSG,\"grammar\":$G,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}"
check "grammar with tools is a 400 naming both" has "$CODE $(jb .error.message)" "400 .*'grammar' or 'tools'"
post /v1/chat/completions "{$MSG,\"grammar\":7}"
check "a grammar that is not a string is a 400" is "$CODE/$(jb .error.param)" 400/grammar
post /v1/chat/completions "{$MSG,\"grammar\":\"\",\"max_tokens\":2}"
check "an empty grammar is no grammar" is "$CODE" 200

kvt_stop_server main
kvt_test_done test_server_gbnf
