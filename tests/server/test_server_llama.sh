#!/usr/bin/env bash
# llama-server's own routes on kvtier serve, as its clients call them:
# POST /completion (and /completions) with prompt as a string, token ids,
# strings and token ids mixed (one prompt, with its errors) or several
# prompts, n_predict (0: the prompt is only evaluated into the cache),
# cache_prompt, id_slot, n_probs and stream, the answer's content,
# tokens_cached and timings; GET /slots (prompt text only
# for the admin key); POST /apply-template; the paths without /v1; and on
# /v1/completions prompt arrays and echo; llama.cpp's samplers order; an unknown "model" is a 404
# model_not_found in OpenAI's error shape, the served names are accepted.
# Needs curl and jq.
set -u
command -v curl >/dev/null && command -v jq >/dev/null || { echo "SKIP: needs curl and jq"; exit 77; }
. "$(dirname "$0")/../testutil.sh"
has() { grep -q -- "$2" <<<"$1" || { echo "  '$1' lacks '$2'" >&2; return 1; }; }
has_text() { grep -qF -- "$2" <<<"$1" || { echo "  '$1' lacks '$2'" >&2; return 1; }; }

"$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 >/dev/null 2>&1 ||
  { echo "mkmodel failed"; exit 1; }
KVT_SERVE_ARGS=(-m "$TMP/m.gguf" --host 127.0.0.1 -t 1)
kvt_start_server main --alias tiny,tiny-chat --admin-key adm-key --ctx 8192 --max-tokens-limit 8000
ADMIN=(-H 'Authorization: Bearer adm-key')
LONG="The quick brown fox jumps over the lazy dog while the cache keeps every block it has seen before, so a repeat is cheap."

# ---- /completion ---------------------------------------------------------------------------------
post /completion "{\"prompt\": \"$LONG\", \"n_predict\": 6, \"temperature\": 0, \"cache_prompt\": true, \"id_slot\": -1}"
check "/completion answers" is "$CODE" 200
check "... content, a string" is "$(jb '.content | type')" string
check "... stop true, index 0" is "$(jb '[.stop, .index] | @csv')" 'true,0'
check "... the model's name" is "$(jb .model)" tiny
check "... tokens_predicted at most n_predict" bash -c "[ $(jb .tokens_predicted) -ge 1 ] && [ $(jb .tokens_predicted) -le 6 ]"
check "... tokens_evaluated: the whole prompt" gt "$(jb .tokens_evaluated)" 20
check "... tokens_cached: what the slot holds, prompt and generated" \
  is "$(jb .tokens_cached)" "$(jb '.tokens_evaluated + .tokens_predicted')"
check "... timings with llama-server's fields" is "$(jb '.timings | [has("prompt_n"), has("prompt_ms"),
  has("prompt_per_token_ms"), has("prompt_per_second"), has("predicted_n"), has("predicted_ms"),
  has("predicted_per_token_ms"), has("predicted_per_second")] | all')" true
check "... a cold prompt is all computed" is "$(jb '[.timings.prompt_n, .timings.cache_n] | @csv')" \
  "$(jb '.tokens_evaluated'),0"
check "... predicted_n = tokens_predicted" is "$(jb .timings.predicted_n)" "$(jb .tokens_predicted)"
FIRST=$(jb .content) EVAL=$(jb .tokens_evaluated)
post /completion "{\"prompt\": \"$LONG\", \"n_predict\": 6, \"temperature\": 0}"
check "a repeat reuses the cached prompt (timings.cache_n)" gt "$(jb .timings.cache_n)" 0
check "... prompt_n + cache_n = the prompt" is "$(jb '.timings.prompt_n + .timings.cache_n')" "$EVAL"
check "... and says the same text" is "$(jb .content)" "$FIRST"
post /completions "{\"prompt\": \"$LONG\", \"n_predict\": 6, \"temperature\": 0}"
check "/completions is the same route" is "$(jb .content)" "$FIRST"

IDS=$(curl -s -m 10 -H 'Content-Type: application/json' -d '{"content": "Hello world"}' "$URL/tokenize" | jq -c .tokens)
post /completion "{\"prompt\": $IDS, \"n_predict\": 3, \"temperature\": 0}"
check "a prompt of token ids" is "$CODE" 200
check "... evaluates those tokens" is "$(jb .tokens_evaluated)" "$(echo "$IDS" | jq length)"
post /completion "{\"prompt\": [\"Hello\", $IDS, \"Good morning\"], \"n_predict\": 3, \"temperature\": 0}"
check "several prompts: one answer each, in order" is "$(jb -c '[.[] | .index]')" '[0,1,2]'
check "... each whole" is "$(jb '[.[] | .stop] | all')" true

# ---- mixed prompts: an array of strings and token ids is ONE prompt, as llama-server reads it ----
# its ids as given, each string tokenized in place, special tokens (BOS) only for a string that
# comes first; the expected ids are put together from /tokenize of each piece alone
tok() { curl -s -m 10 -H 'Content-Type: application/json' -d "$1" "$URL/tokenize" | jq -c .tokens; }
HEAD="A mixed prompt starts with this text, " TAIL=" and ends with text again."
T_HEAD=$(tok "{\"content\": \"$HEAD\", \"add_special\": true}") T_LONG=$(tok "{\"content\": \"$LONG\"}")
T_TAIL=$(tok "{\"content\": \"$TAIL\"}") T_TAIL_BOS=$(tok "{\"content\": \"$TAIL\", \"add_special\": true}")
check "the model adds a BOS (what the checks of its place need)" is "$(jq -c '.[0][1:] == .[1]' <<<"[$T_TAIL_BOS, $T_TAIL]")" true
MIXED="[\"$HEAD\", $(jq -c '.[]' <<<"$T_LONG" | paste -sd,), \"$TAIL\"]"
WANT=$(jq -c 'add' <<<"[$T_HEAD, $T_LONG, $T_TAIL]")
check "/tokenize of a mixed content: the pieces' ids in order, BOS only before the leading text" \
  is "$(tok "{\"content\": $MIXED, \"add_special\": true}")" "$WANT"
check "... a text after an id gets no BOS" \
  is "$(tok "{\"content\": [7, \"$TAIL\"], \"add_special\": true}")" "$(jq -c '[7] + .' <<<"$T_TAIL")"
post /completion "{\"prompt\": $MIXED, \"n_predict\": 6, \"temperature\": 0, \"return_tokens\": true}"
check "/completion takes a mixed prompt as one prompt" is "$CODE/$(jb '.content | type')" 200/string
check "... evaluates exactly its tokens" is "$(jb .tokens_evaluated)" "$(jq length <<<"$WANT")"
check "... cold" is "$(jb .timings.cache_n)" 0
MIX_TOKENS=$(jb -c .tokens) MIX_TEXT=$(jb .content)
post /completion "{\"prompt\": $WANT, \"n_predict\": 6, \"temperature\": 0, \"return_tokens\": true}"
check "the same prompt as token ids reuses the mixed prompt's cache" gt "$(jb .timings.cache_n)" 0
check "... and generates the same tokens (greedy)" is "$(jb -c .tokens)" "$MIX_TOKENS"
post /v1/completions "{\"prompt\": [$(jq -c '.[]' <<<"$T_LONG" | paste -sd,), \"$TAIL\"], \"max_tokens\": 4, \"temperature\": 0}"
check "/v1/completions: a mixed prompt that starts with ids is one prompt" is "$CODE/$(jb '.choices | length')" 200/1
check "... of its ids and the text's, no BOS" is "$(jb .usage.prompt_tokens)" "$(jq -n "$T_LONG + $T_TAIL | length")"
post /v1/completions "{\"prompt\": $MIXED, \"max_tokens\": 6, \"temperature\": 0, \"echo\": true}"
check "... with echo: the texts and the ids' text before the completion" \
  is "$(jb '.choices[0].text')" "$HEAD$LONG$TAIL$MIX_TEXT"
post /completion "{\"prompt\": [$MIXED, \"Hello\", $IDS], \"n_predict\": 3, \"temperature\": 0}"
check "an array of prompts may hold mixed prompts" is "$CODE/$(jb -c '[.[] | .index]')" '200/[0,1,2]'
check "... the mixed one whole" is "$(jb '.[0].tokens_evaluated')" "$(jq length <<<"$WANT")"
# what is wrong in a prompt is named by its place, with the reason
for c in '["Hi", 5, 99999]|prompt[2] is a token id outside [0, ' '[5, "Hi", 2.5]|prompt[2] is 2.5, not a token id' \
  '["Hi", 5, [1, 2]]|prompt[2] is an array' '["Hi", 5, null]|prompt[2] is null' '[5, "Hi", {"a": 1}]|prompt[2] is an object' \
  '["Hi", 5, ""]|prompt[2] is an empty string' '["Hi", 5, true]|prompt[2] is a boolean' '[]|prompt is an empty array' \
  '["Hi", []]|prompt[1] is an empty array' '[[5, "Hi", -1], "x"]|prompt[0][2] is a token id outside' \
  '["Hi", null]|prompt[1] is null: an array of prompts holds' '[[1, 2], 3]|prompt[1] is a number: an array of prompts'; do
  for path in /completion /v1/completions; do
    post "$path" "{\"prompt\": ${c%%|*}, \"max_tokens\": 2}"
    check "$path ${c%%|*} is a 400 naming prompt: ${c#*|}" is "$CODE/$(jb .error.param)" 400/prompt
    check "... saying what is wrong" has_text "$(jb .error.message)" "${c#*|}"
  done
done
post /tokenize '{"content": ["Hi", 5, 99999]}'
check "/tokenize: a token id out of range is a 400 naming content" is "$CODE/$(jb .error.param)" 400/content
post /completion "{\"prompt\": \"Hello\", \"n_predict\": 3, \"temperature\": 0, \"n_probs\": 2}"
check "n_probs: completion_probabilities per token" is "$(jb '.completion_probabilities | length')" "$(jb .tokens_predicted)"
check "... each with id, token, logprob, bytes and n_probs alternatives" \
  is "$(jb '[.completion_probabilities[] | (has("id") and has("token") and has("logprob") and has("bytes") and
  (.top_logprobs | length) == 2)] | all')" true
post /completion '{"prompt": "Hello", "n_probs": 99}'
check "n_probs out of range is a 400 naming it" is "$CODE/$(jb .error.param)" 400/n_probs
post /completion '{"prompt": "Hello", "id_slot": 9}'
check "an id_slot past --parallel is a 400 naming it" is "$CODE/$(jb .error.param)" 400/id_slot
# values past int's range are refused before any conversion (one would be undefined behaviour)
post /completion '{"prompt": "Hello", "n_probs": 1e300}'
check "n_probs 1e300 is a 400 naming it" is "$CODE/$(jb .error.param)" 400/n_probs
post /completion '{"prompt": "Hello", "id_slot": -1e300}'
check "id_slot -1e300 is a 400 naming it" is "$CODE/$(jb .error.param)" 400/id_slot
# llama.cpp's sampling fields kvtier does not implement: taken at their "off" value, else a 400
# naming them (ignored, each would give other output than asked)
for f in '"top_n_sigma": 1.5' \
  '"post_sampling_probs": true' '"lora": [{"id": 0, "scale": 1}]'; do
  post /completion "{\"prompt\": \"Hello\", \"n_predict\": 1, $f}"
  check "$f is a 400 naming it" is "$CODE/$(jb .error.param)" "400/$(sed 's/^"\([a-z_]*\)".*/\1/' <<<"$f")"
done
post /completion '{"prompt": "Hello", "n_predict": 1, "top_n_sigma": -1, "min_keep": 1, "t_max_predict_ms": 0, "n_indent": 0, "post_sampling_probs": false, "lora": []}'
check "... and accepted at their off values" is "$CODE" 200
# ---- samplers: llama.cpp's order of the sampling steps -------------------------------------------
S='"prompt": "Once upon a time", "n_predict": 12'
post /completion "{$S, \"temperature\": 0}"
GREEDY=$(jb .content)
for o in '"kt"' '"edkypmxt"' '["temperature", "top_k"]' '""' '[]'; do
  post /completion "{$S, \"temperature\": 0, \"top_p\": 0.5, \"samplers\": $o}"
  check "temperature 0 with samplers $o stays greedy" is "$CODE/$(jb .content)" "200/$GREEDY"
done
# top_k 1 listed: only the best token, at any temperature; left out of the order: not applied
post /completion "{$S, \"temperature\": 1.5, \"top_k\": 1, \"seed\": 1, \"samplers\": \"kt\"}"
check "top_k 1 in the order gives the greedy text" is "$CODE/$(jb .content)" "200/$GREEDY"
differs=0
post /completion "{$S, \"temperature\": 1.5, \"seed\": -1, \"ignore_eos\": true}"
R1=$(jb .content)
post /completion "{$S, \"temperature\": 1.5, \"seed\": -1, \"ignore_eos\": true}"
check "seed -1 is llama.cpp's random seed: two sampled replies differ" test "$(jb .content)" != "$R1"
post /completion "{$S, \"temperature\": 1.5, \"seed\": 4294967295, \"ignore_eos\": true}"
check "... and so is 4294967295 (accepted, another reply)" test "$CODE" = 200 -a "$(jb .content)" != "$R1"
for seed in 1 2 3; do
  post /completion "{$S, \"temperature\": 1.5, \"top_k\": 1, \"seed\": $seed, \"samplers\": [\"temperature\"]}"
  [ "$CODE" = 200 ] && [ "$(jb .content)" != "$GREEDY" ] && differs=$((differs + 1))
done
check "top_k 1 left out of the order is not applied: a sampled text differs" gt "$differs" 0
post /completion "{$S, \"temperature\": 1.2, \"top_p\": 0.9, \"min_p\": 0.02, \"seed\": 7, \"samplers\": \"pmkt\"}"
ORDERED=$(jb .content)
post /completion "{$S, \"temperature\": 1.2, \"top_p\": 0.9, \"min_p\": 0.02, \"seed\": 7, \"samplers\": \"pmkt\"}"
check "a seed replays the same text under an order" is "$CODE/$(jb .content)" "200/$ORDERED"
post /v1/chat/completions '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "samplers": ["top_k", "temperature"]}'
check "chat takes samplers too" is "$CODE" 200
for bad in '"kz"' '["top_k", "nucleus"]' '[7]' '5' '{"a": 1}' '"kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"'; do
  post /completion "{\"prompt\": \"Hello\", \"n_predict\": 1, \"samplers\": $bad}"
  want=samplers
  [ "$bad" = '[7]' ] && want='samplers[0]' # an item of the wrong type is named by its place
  check "samplers $bad is a 400 naming it" is "$CODE/$(jb .error.param)" "400/$want"
done
check "... saying why" has "$(jb .error.message)" "more than 32"
# llama.cpp's typical, XTC, min_keep, dynamic temperature and Mirostat. Each off value gives the text
# without it; a filter that leaves one candidate gives one text for every seed.
post /completion "{$S, \"temperature\": 0, \"typical_p\": 1, \"xtc_probability\": 0, \"min_keep\": 0, \"dynatemp_range\": 0, \"mirostat\": 0}"
check "their off values: the greedy text" is "$CODE/$(jb .content)" "200/$GREEDY"
post /completion "{$S, \"temperature\": 0, \"typical_p\": 1, \"xtc_probability\": 0, \"min_keep\": 0, \"dynatemp_range\": 0, \"mirostat\": 0}"
check "... and generation_settings says them (x 100)" is "$(jb '.generation_settings | [.typical_p, .xtc_probability, .xtc_threshold, .dynatemp_range, .dynatemp_exponent, .mirostat, .mirostat_tau, .mirostat_eta, .min_keep] | map(. * 100 | round | tostring) | join(",")')" "100,0,10,0,100,0,500,10,0"
one_text() { # FIELDS [TEMPERATURE]: the texts of seeds 1-3 (at 1.5 by default), one line if they agree
  for seed in 1 2 3; do
    post /completion "{$S, \"temperature\": ${2:-1.5}, \"seed\": $seed, \"ignore_eos\": true, $1}"
    echo "$CODE/$(jb .content)"
  done | sort -u
}
TYP=$(one_text '"typical_p": 0')
check "typical_p 0 keeps one token a step: one text for three seeds" is "$(wc -l <<<"$TYP")" 1
check "... not the greedy one (the most typical token is not always the most likely)" test "$TYP" != "200/$GREEDY"
post /completion "{$S, \"temperature\": 0, \"typical_p\": 0}"
check "... and temperature 0 gives it too, as llama.cpp's" is "$CODE/$(jb .content)" "$TYP"
check "... generation_settings says typical_p 0" is "$(jb .generation_settings.typical_p)" 0
XTC=$(one_text '"xtc_probability": 1, "xtc_threshold": 0')
check "XTC at threshold 0 keeps the least likely token: one text for three seeds" is "$(wc -l <<<"$XTC")" 1
check "... not the greedy one" test "$XTC" != "200/$GREEDY" -a "$XTC" != "$TYP"
XTCK=$(one_text '"xtc_probability": 1, "xtc_threshold": 0, "min_keep": 100000')
check "... min_keep past the vocabulary turns it off: the seeds' texts differ" gt "$(wc -l <<<"$XTCK")" 1
MIRO=$(one_text '"mirostat": 2, "mirostat_tau": 0, "mirostat_eta": 0')
check "Mirostat 2 with tau 0 keeps only the best token: the greedy text" is "$MIRO" "200/$GREEDY"
post /completion "{$S, \"temperature\": 1, \"seed\": 5, \"mirostat\": 1}"
M1=$(jb .content)
post /completion "{$S, \"temperature\": 1, \"seed\": 5, \"mirostat\": 1}"
check "Mirostat 1 replays its seed" is "$CODE/$(jb .content)" "200/$M1"
DYN=$(one_text '"dynatemp_range": 1.5' 0)
check "temperature 0 with a dynamic range samples, as llama.cpp's: the seeds' texts differ" gt "$(wc -l <<<"$DYN")" 1
# DRY with an allowed length of 0 and no breakers takes 100 or more from every token that followed
# another in the prompt or the reply: the greedy reply repeats none of those ids
DRYQ="\"temperature\": 0, \"ignore_eos\": true, \"return_tokens\": true, \"dry_multiplier\": 100, \"dry_allowed_length\": 0"
post /completion "{$S, $DRYQ, \"dry_sequence_breakers\": [\"@@@@@@@@\"]}"
DRY_IDS=$(jb '.tokens | map(tostring) | join(" ")')
DRY_TEXT=$(jb .content)
post /tokenize '{"content": "Once upon a time"}'
PROMPT_IDS=$(jb '.tokens | unique | map(tostring) | join(" ")')
check "DRY: the reply's ids are all different (12 of 12)" is "$(tr ' ' '\n' <<<"$DRY_IDS" | sort -u | wc -l)" 12
check "... and none is in the prompt (each follows another there, or BOS)" is "$(tr ' ' '\n' <<<"$DRY_IDS $PROMPT_IDS" | sort | uniq -d | wc -l)" 0
check "... where greedy repeats itself" test "$DRY_TEXT" != "$GREEDY"
post /completion "{$S, $DRYQ, \"dry_sequence_breakers\": [\"@@@@@@@@\"], \"samplers\": [\"top_k\", \"temperature\"]}"
check "dry left out of the order: dry_multiplier is inert" is "$CODE/$(jb .content)" "200/$GREEDY"
post /completion "{$S, $DRYQ, \"dry_penalty_last_n\": 0}"
check "dry_penalty_last_n 0 turns it off" is "$CODE/$(jb .content)" "200/$GREEDY"
post /completion "{$S, $DRYQ, \"dry_sequence_breakers\": [\"@@@@@@@@\"]}"
check "... and generation_settings says DRY's fields" is "$(jb '.generation_settings | [.dry_multiplier, .dry_base, .dry_allowed_length, .dry_penalty_last_n] | map(. * 100 | round | tostring) | join(",")')" "10000,175,0,-100"
for bad in '"mirostat": 3' '"typical_p": 1.5' '"xtc_threshold": -0.1' '"min_keep": 1.5' '"mirostat_eta": "x"' \
  '"dry_penalty_last_n": -2' '"dry_allowed_length": -1' '"dry_sequence_breakers": []' '"dry_sequence_breakers": [""]' \
  '"dry_sequence_breakers": "x"' '"dry_sequence_breakers": [1]'; do
  post /completion "{\"prompt\": \"Hello\", \"n_predict\": 1, $bad}"
  want=$(sed 's/^"\([a-z_]*\)".*/\1/' <<<"$bad")
  [ "$bad" = '"dry_sequence_breakers": [1]' ] && want='dry_sequence_breakers[0]' # named by its place
  check "$bad is a 400 naming it" is "$CODE/$(jb .error.param)" "400/$want"
done
# kvtier run --samplers reads the order as the server does: with the same prompt, values and seed,
# the server's text under that order (and, without it, under the default order, which differs).
# The random model writes stray bytes, which run prints as they are and the server as U+FFFD:
# the two are compared on their ASCII characters.
ascii() { LC_ALL=C tr -cd '\11\12\40-\176'; }
V='"temperature": 1.5, "top_k": 40, "top_p": 0.6, "seed": 3, "ignore_eos": true'
post /completion "{$S, $V, \"samplers\": \"kt\"}"
SRV_KT=$(jb .content)
SRV_KT_A=$(ascii <<<"$SRV_KT")
post /completion "{$S, $V}"
SRV_DEF=$(jb .content)
SRV_DEF_A=$(ascii <<<"$SRV_DEF")
post /completion "{$S, $V, \"samplers\": \"kpt\"}"
SRV_KPT=$(jb .content)
check "... and top_p in it too" test "$SRV_KPT" != "$SRV_KT"
check "the order changes the server's sampled text" test "$SRV_KT" != "$SRV_DEF"
RUNA=(run -m "$TMP/m.gguf" -p "Once upon a time" -n 12 --temp 1.5 --top-k 40 --top-p 0.6 --seed 3 --ignore-eos -t 1)
check "... also in their ASCII characters" test "$SRV_KT_A" != "$SRV_DEF_A"
check "run --samplers kt: the server's text under that order" is "$("$BIN" "${RUNA[@]}" --samplers kt 2>/dev/null | ascii)" "$SRV_KT_A"
check "... the same as names" is "$("$BIN" "${RUNA[@]}" --samplers 'top_k;temperature' 2>/dev/null | ascii)" "$SRV_KT_A"
check "... and as \$KVTIER_SAMPLERS" is "$(KVTIER_SAMPLERS=top_k,temperature "$BIN" "${RUNA[@]}" 2>/dev/null | ascii)" "$SRV_KT_A"
check "run without it: the default order's text" is "$("$BIN" "${RUNA[@]}" 2>/dev/null | ascii)" "$SRV_DEF_A"
post /completion "{$S, $V, \"samplers\": \"kti\"}"
check "run --samplers kti: the server's text under llama.cpp's infill step too" \
  is "$("$BIN" "${RUNA[@]}" --samplers kti 2>/dev/null | ascii)" "$(jb .content | ascii)"
for bad in 'kz' 'top_k;nucleus' 'top_k;' "$(printf 'k%.0s' $(seq 33))"; do
  check "run --samplers '$bad' is a usage error" expect_rc 2 "$BIN" "${RUNA[@]}" --samplers "$bad"
  check "... naming the flag" grep -q "kvtier run: --samplers " "$TMP/out"
done
check "... saying what is wrong" grep -q "more than 32" "$TMP/out"
RUNX=(run -m "$TMP/m.gguf" -p "Once upon a time" -n 12 --ignore-eos -t 1 --top-k 0 --top-p 1)
check "run --xtc-probability 1 --xtc-threshold 0 at --temp 0: the server's XTC text" \
  is "$("$BIN" "${RUNX[@]}" --temp 0 --xtc-probability 1 --xtc-threshold 0 2>/dev/null | ascii)" "$(ascii <<<"${XTC#200/}")"
check "run --mirostat 2 with target 0 and rate 0: the greedy text" \
  is "$("$BIN" "${RUNX[@]}" --temp 1.5 --seed 4 --mirostat 2 --mirostat-ent 0 --mirostat-lr 0 2>/dev/null | ascii)" \
  "$(ascii <<<"$GREEDY")"
check "run --typical 0 at --temp 1.5: the server's typical_p 0 text" \
  is "$("$BIN" "${RUNX[@]}" --temp 1.5 --seed 5 --typical 0 2>/dev/null | ascii)" "$(ascii <<<"${TYP#200/}")"
check "run --dry-multiplier 100 --dry-allowed-length 0 at --temp 0: the server's DRY text" \
  is "$("$BIN" "${RUNX[@]}" --temp 0 --dry-multiplier 100 --dry-allowed-length 0 --dry-sequence-breaker @@@@@@@@ 2>/dev/null | ascii)" \
  "$(ascii <<<"$DRY_TEXT")"
check "run --dry-sequence-breaker '' is a usage error" expect_rc 2 "$BIN" "${RUNX[@]}" --dry-sequence-breaker ''
check "run --mirostat 3 is a usage error naming the flag" expect_rc 2 "$BIN" "${RUNX[@]}" --mirostat 3
check "... and its range" grep -q -- "--mirostat" "$TMP/out"
check "serve --samplers with a bad name is a usage error" expect_rc 2 "$BIN" serve -m "$TMP/m.gguf" --samplers 'top_k;x'
check "... naming the flag and the name" grep -q "kvtier serve: --samplers holds an unknown sampler 'x'" "$TMP/out"

WARM="Warm this prefix first: $LONG"
post /completion "{\"prompt\": \"$WARM\", \"n_predict\": 0}"
check "n_predict 0 evaluates the prompt and generates nothing" \
  is "$(jb -c '[.content, .tokens_predicted, .stop, .stop_type]')" '["",0,true,"limit"]'
check "... the whole prompt is evaluated" is "$(jb .tokens_evaluated)" "$(jb .timings.prompt_n)"
check "... generation_settings say the n_predict it ran with" \
  is "$(jb -c '[.generation_settings.n_predict, .generation_settings.max_tokens]')" '[0,0]'
post /completion "{\"prompt\": \"$WARM\", \"n_predict\": 2, \"temperature\": 0}"
check "... and cached: the next request on it reuses it" gt "$(jb .timings.cache_n)" 0
check "... and generates" is "$(jb .tokens_predicted)" 2
curl -s -m 60 -N -H 'Content-Type: application/json' -o "$TMP/sse0" \
  -d '{"prompt": "Hello", "n_predict": 0, "stream": true}' "$URL/completion"
check "n_predict 0 streamed: one stop event, no text" \
  is "$(grep '^data: ' "$TMP/sse0" | sed 's/^data: //' | jq -s -c '[length, .[0].stop, .[0].content]')" '[1,true,""]'
post /completion '{"prompt": "Hello", "n_predict": 0, "n": 2}'
check "n_predict 0 with n 2 is a 400 naming n_predict" is "$CODE/$(jb .error.param)" 400/n_predict
post /completion '{"prompt": ["a", "b"], "stream": true}'
check "several prompts cannot stream" is "$CODE/$(jb .error.param)" 400/prompt
{ printf '{"prompt":['; head -c $((2 * 1024 * 1024)) /dev/zero | tr '\0' '1' | sed 's/1/1,/g'; printf '1]}'; } >"$TMP/ids.json"
CODE=$(curl -s -m 60 -o "$TMP/body" -w '%{http_code}' -H 'Content-Type: application/json' --data-binary @"$TMP/ids.json" \
  "$URL/completion")
check "4 MB of token ids: refused on their count" is "$CODE/$(jb .error.code)" 400/context_length_exceeded

curl -s -m 60 -N -H 'Content-Type: application/json' -o "$TMP/sse" \
  -d "{\"prompt\": \"$LONG\", \"n_predict\": 6, \"temperature\": 0, \"stream\": true}" "$URL/completion"
grep '^data: ' "$TMP/sse" | sed 's/^data: //' >"$TMP/events"
check "a /completion stream: llama-server's events" is "$(jq -s '[.[] | has("content") and has("stop")] | all' "$TMP/events")" true
check "... its text is the answer's" is "$(jq -j '.content' "$TMP/events")" "$FIRST"
check "... the last one stops, with timings" is "$(jq -s -c '.[-1] | [.stop, (.timings | has("predicted_n"))]' "$TMP/events")" '[true,true]'
check "... only the last one stops" is "$(jq -s '[.[] | select(.stop)] | length' "$TMP/events")" 1
check "... and no [DONE] (llama-server sends none there)" bash -c "! grep -q DONE '$TMP/sse'"

# ---- the fields llama-server's clients read and send ------------------------------------------------
post /completion "{\"prompt\": \"$LONG\", \"n_predict\": 6, \"temperature\": 0, \"return_tokens\": true, \"n_probs\": 1}"
check "return_tokens: the generated ids in tokens" is "$(jb -c .tokens)" "$(jb -c '[.completion_probabilities[].id]')"
check "... one per token predicted" is "$(jb '.tokens | length')" "$(jb .tokens_predicted)"
IDS6=$(jb -c .tokens)
check "... the text is theirs" is "$(jb .content)" "$FIRST"
check "... generation_settings says what the request ran with" \
  is "$(jb -c '.generation_settings | [.n_predict, .temperature, .n_probs, .stream]')" '[6,0,1,false]'
# as text with its special tokens, as llama-server gives it: the vocabulary's start token first
check "... and prompt is the request's own prompt" is "$(jq -r --arg p "$LONG" '.prompt | endswith($p)' "$TMP/body")" true
post /completion '{"prompt": "Hello", "n_predict": 2, "temperature": 0}'
check "without return_tokens, tokens is empty (as llama-server's)" is "$(jb -c .tokens)" '[]'
post /completion '{"prompt": "Hello", "return_tokens": "yes"}'
check "a return_tokens that is no boolean is a 400 naming it" is "$CODE/$(jb .error.param)" 400/return_tokens
curl -s -m 60 -N -H 'Content-Type: application/json' -o "$TMP/sse_ids" \
  -d "{\"prompt\": \"$LONG\", \"n_predict\": 6, \"temperature\": 0, \"stream\": true, \"return_tokens\": true}" \
  "$URL/completion"
grep '^data: ' "$TMP/sse_ids" | sed 's/^data: //' >"$TMP/events_ids"
check "... streamed, each event's tokens join to the same ids" is "$(jq -s -c '[.[].tokens[]]' "$TMP/events_ids")" "$IDS6"
check "... and each text event counts tokens_predicted and tokens_evaluated" \
  is "$(jq -s -c '[.[] | select(.stop | not) | (has("tokens_predicted") and has("tokens_evaluated"))] | all' \
  "$TMP/events_ids")" true
# a stop string ends the answer with stop_type "word" and names it in stopping_word
# (a character of the greedy text: not U+FFFD, which stands for bytes that are no whole character)
STOPC=$(jq -rn --arg t "$FIRST" '[$t | explode[] | select(. > 32 and . != 34 and . != 92 and . != 127 and . != 65533)] |
  if length > 0 then [.[0]] | implode else "" end')
if [ -n "$STOPC" ]; then
  post /completion "{\"prompt\": \"$LONG\", \"n_predict\": 6, \"temperature\": 0, \"stop\": [\"$STOPC\"]}"
  check "a stop string: stop_type word, stopping_word the string" is "$(jb -c '[.stop_type, .stopping_word]')" \
    "[\"word\",\"$STOPC\"]"
  check "... the text ends before it" is "$(jb .content)" "${FIRST%%"$STOPC"*}"
else
  kvt_test_skip_part "the greedy text '$FIRST' has no whole character to stop on: stop_type word not checked"
fi
# llama-server's logit_bias: [id, bias] and [text, bias] pairs, false bans the token
G1=$(jq '.[0]' <<<"$IDS6")
post /completion "{\"prompt\": \"$LONG\", \"n_predict\": 1, \"temperature\": 0, \"return_tokens\": true, \"logit_bias\": [[$G1, false]]}"
check "logit_bias [[id, false]] bans the token" bash -c '[ "$1" != "$2" ]' _ "$(jb '.tokens[0]')" "$G1"
post /completion "{\"prompt\": \"$LONG\", \"n_predict\": 1, \"temperature\": 0, \"return_tokens\": true, \"logit_bias\": [[$G1, -100]]}"
check "... as [[id, -100]] does" bash -c '[ "$1" != "$2" ]' _ "$(jb '.tokens[0]')" "$G1"
HELLO=$(curl -s -m 10 -H 'Content-Type: application/json' -d '{"content": "Hello world"}' "$URL/tokenize" |
  jq -c '[.tokens[] | [., false]]')
post /completion "{\"prompt\": \"$LONG\", \"n_predict\": 6, \"temperature\": 0, \"return_tokens\": true, \"logit_bias\": $HELLO}"
BYID=$(jb -c .tokens)
post /completion "{\"prompt\": \"$LONG\", \"n_predict\": 6, \"temperature\": 0, \"return_tokens\": true, \"logit_bias\": [[\"Hello world\", false]]}"
check "... [text, false] bans each token of the text" is "$(jb -c .tokens)" "$BYID"
post /v1/completions "{\"prompt\": \"$LONG\", \"max_tokens\": 1, \"temperature\": 0, \"logprobs\": 1}"
# (the chosen token's logprob is the model's, before the bias: another token has another one)
V1=$(jb '.choices[0].logprobs.token_logprobs[0]')
post /v1/completions "{\"prompt\": \"$LONG\", \"max_tokens\": 1, \"temperature\": 0, \"logprobs\": 1, \"logit_bias\": [[$G1, false]]}"
check "... on /v1/completions too" bash -c '[ "$1" != "$2" ]' _ "$(jb '.choices[0].logprobs.token_logprobs[0]')" "$V1"
post /completion '{"prompt": "Hello", "logit_bias": [[1, true]]}'
check "... a pair with a bias that is no number or false is a 400 naming logit_bias" is "$CODE/$(jb .error.param)" \
  400/logit_bias
# repeat_last_n is llama-server's name of the penalty window: 0 turns the penalties off
PEN='"prompt": "'"$LONG"'", "n_predict": 24, "temperature": 0, "ignore_eos": true'
post /completion "{$PEN}"
PLAIN=$(jb .content)
post /completion "{$PEN, \"repeat_penalty\": 10}"
PENAL=$(jb .content)
if [ "$PLAIN" != "$PENAL" ]; then
  post /completion "{$PEN, \"repeat_penalty\": 10, \"repeat_last_n\": 0}"
  check "repeat_last_n 0 turns repeat_penalty off" is "$(jb .content)" "$PLAIN"
  post /completion "{$PEN, \"repeat_penalty\": 10, \"repeat_last_n\": 3}"
  R3=$(jb .content)
  post /completion "{$PEN, \"repeat_penalty\": 10, \"penalty_last_n\": 3}"
  check "... repeat_last_n N is penalty_last_n N" is "$R3" "$(jb .content)"
else
  kvt_test_skip_part "repeat_penalty 10 did not change the greedy text: repeat_last_n not checked"
fi
post /completion "{$PEN, \"repeat_last_n\": 3, \"penalty_last_n\": 3}"
check "... both names at once is a 400" is "$CODE/$(jb .error.param)" 400/repeat_last_n

# llama-server's web UI sends these with every chat (max_tokens -1 is its "no limit"; n_predict here
# only keeps the test short): all taken
WEBUI='"stream": false, "cache_prompt": true, "samplers": "edkypmxt", "temperature": 0.8, "dynatemp_range": 0,
  "dynatemp_exponent": 1, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "typical_p": 1, "xtc_probability": 0,
  "xtc_threshold": 0.1, "repeat_last_n": 64, "repeat_penalty": 1, "presence_penalty": 0, "frequency_penalty": 0,
  "dry_multiplier": 0, "dry_base": 1.75, "dry_allowed_length": 2, "dry_penalty_last_n": -1, "max_tokens": -1,
  "timings_per_token": false'
post /v1/chat/completions "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], $WEBUI, \"n_predict\": 4}"
check "llama-server's web UI request is answered" is "$CODE/$(jb '.usage.completion_tokens <= 4')" 200/true

post /v1/completions '{"prompt": ["Hello", "Good morning"], "max_tokens": 3, "temperature": 0}'
check "/v1/completions takes a prompt array: a choice per prompt" is "$(jb -c '[.choices[].index]')" '[0,1]'
A0=$(jb '.choices[0].text') A1=$(jb '.choices[1].text') PT=$(jb .usage.prompt_tokens)
post /v1/completions '{"prompt": "Good morning", "max_tokens": 3, "temperature": 0}'
check "... each choice as its prompt alone gets" is "$A1" "$(jb '.choices[0].text')"
check "... usage sums the prompts" gt "$PT" "$(jb .usage.prompt_tokens)"
post /v1/completions '{"prompt": ["Hello", "Good morning"], "max_tokens": 3, "temperature": 0, "n": 2}'
check "... with n: prompt-major choices" is "$(jb -c '[.choices[].index]')" '[0,1,2,3]'
post /v1/completions '{"prompt": "Hello", "max_tokens": 3, "temperature": 0, "echo": true}'
check "echo puts the prompt before the text" is "$(jb '.choices[0].text')" "Hello$A0"
post /v1/completions '{"prompt": "Hello", "echo": true, "logprobs": 1}'
check "echo with logprobs is a 400 naming echo" is "$CODE/$(jb .error.param)" 400/echo
for EMPTY in '[]' '[[]]' '[""]'; do
  post /v1/completions "{\"prompt\": $EMPTY, \"max_tokens\": 1}"
  [ "$EMPTY" = '[""]' ] && { check "a prompt array of one empty string is one empty prompt" is "$CODE" 200; continue; }
  check "prompt $EMPTY: a 400 that says it is empty" is "$CODE/$(jb .error.param)/$(jb '.error.message | test("empty")')" \
    400/prompt/true
done

# ---- model names -------------------------------------------------------------------------------
post /v1/completions '{"model": "gpt-4o", "prompt": "Hello", "max_tokens": 1}'
check "an unknown model is a 404" is "$CODE" 404
check "... model_not_found in OpenAI's shape" is "$(jb -c '.error | [.type, .param, .code]')" \
  '["invalid_request_error","model","model_not_found"]'
post /v1/chat/completions '{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}'
check "... on chat too" is "$CODE/$(jb .error.code)" 404/model_not_found
for name in tiny tiny-chat m m.gguf; do
  post /v1/chat/completions "{\"model\": \"$name\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 1}"
  check "the served name '$name' is accepted" is "$CODE" 200
done
check "/v1/models names the first alias" is "$(curl -s -m 10 "$URL/v1/models" | jq -r '.data[0].id')" tiny

# ---- paths without /v1, /apply-template, /slots ------------------------------------------------------------
check "GET /models as /v1/models" is "$(curl -s -m 10 "$URL/models" | jq -r '.data[0].id')" tiny
post /chat/completions '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}'
check "POST /chat/completions as /v1/chat/completions" is "$CODE/$(jb .object)" 200/chat.completion
post /apply-template '{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]}'
# the model's template renders it; its tokenizer adds its start token (add_bos_token), as llama-server's does
check "/apply-template renders the chat prompt" is "$(jb .prompt)" \
  "$(printf '<|endoftext|><|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n')"
post /apply-template '{"messages": "hi"}'
check "... a bad body is a 400 naming messages" is "$CODE/$(jb .error.param)" 400/messages

# HEAD of a GET page answers as the GET, without the body (a health check or monitor may send one)
for p in /health /metrics /v1/models /props /slots; do
  check "HEAD $p is its GET's 200" is "$(curl -s -m 10 -I -o /dev/null -w '%{http_code}' "$URL$p")" 200
done
check "... but not on a POST route" is "$(curl -s -m 10 -I -o /dev/null -w '%{http_code}' "$URL/completion")" 405
CODE=$(curl -s -m 10 -o "$TMP/body" -w '%{http_code}' "$URL/slots")
check "/slots lists --parallel slots" is "$CODE/$(jb length)" 200/4
check "... idle ones" is "$(jb '[.[] | .is_processing] | any')" false
check "... each with params and next_token, as a busy one, and no prompt text" \
  is "$(jb '[.[] | (.params | has("n_predict")) and (.next_token.n_decoded == 0) and .prompt == ""] | all')" true
# a long generation: /slots shows it while it runs, its prompt only to the admin key
curl -s -m 120 -N -H 'Content-Type: application/json' -o /dev/null \
  -d '{"prompt": "SECRET-PROMPT tell a long story", "n_predict": 7000, "ignore_eos": true, "stream": true}' \
  "$URL/completion" &
LONG_PID=$!
busy() { curl -s -m 10 "$URL/slots" "$@" | jq -e '[.[] | select(.is_processing)] | length == 1' >/dev/null; }
check "/slots shows the running request" wait_for busy
curl -s -m 10 "$URL/slots" >"$TMP/slots.open"
curl -s -m 10 "${ADMIN[@]}" "$URL/slots" >"$TMP/slots.admin"
check "... with its figures" is "$(jq '[.[] | select(.is_processing) | .params.n_predict] | .[0]' "$TMP/slots.open")" 7000
check "... but not its prompt without the admin key" bash -c "! grep -q SECRET-PROMPT '$TMP/slots.open'"
check "... which the admin key sees" grep -q SECRET-PROMPT "$TMP/slots.admin"
kill "$LONG_PID" 2>/dev/null; wait "$LONG_PID" 2>/dev/null
kvt_stop_server main

# ---- serve --samplers: the order of a request that sends none ---------------------------------------
# with XTC and DRY on by default, which the order leaves out
kvt_start_server order --samplers 'top_k;temperature' --xtc-probability 1 --xtc-threshold 0 --dry-multiplier 100 \
  --dry-allowed-length 0 --dry-sequence-breaker @@@@@@@@
post /completion "{$S, $V}"
check "serve --samplers: a request without samplers gets that order" is "$CODE/$(jb .content)" "200/$SRV_KT"
post /completion "{$S, $V, \"samplers\": \"kpt\"}"
check "... a request's own samplers win" is "$CODE/$(jb .content)" "200/$SRV_KPT"
post /completion "{$S, \"temperature\": 0, \"ignore_eos\": true, \"samplers\": \"xt\"}"
check "serve --xtc-probability and --xtc-threshold: the defaults of a request's XTC" is "$CODE/$(jb .content)" "$XTC"
post /completion "{$S, \"temperature\": 0, \"samplers\": \"xt\", \"xtc_probability\": 0}"
check "... a request's own xtc_probability wins" is "$CODE/$(jb .content)" "200/$GREEDY"
post /completion "{$S, \"temperature\": 0, \"ignore_eos\": true, \"samplers\": \"dt\"}"
check "serve --dry-*: the defaults of a request's DRY" is "$CODE/$(jb .content)" "200/$DRY_TEXT"
kvt_stop_server order

# ---- keys: the llama-server paths are the tenants' API ---------------------------------------------------
kvt_start_server keyed --api-key k1 --admin-key adm-key
for p in /completion /apply-template; do
  post "$p" '{"prompt": "x", "messages": [{"role": "user", "content": "x"}]}'
  check "$p needs an API key" is "$CODE" 401
done
check "/slots needs one" is "$(curl -s -m 10 -o /dev/null -w '%{http_code}' "$URL/slots")" 401
check "... or the admin key" is "$(curl -s -m 10 -o /dev/null -w '%{http_code}' "${ADMIN[@]}" "$URL/slots")" 200
post /completion '{"prompt": "x", "n_predict": 1}' -H 'Authorization: Bearer k1'
check "/completion with the key" is "$CODE" 200
kvt_stop_server keyed

kvt_test_done test_server_llama
