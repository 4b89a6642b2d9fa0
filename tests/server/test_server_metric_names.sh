#!/usr/bin/env bash
# /metrics gives kvtier's figures under llama-server's llamacpp: names too
# (by default) and, with --metrics-names vllm, under vLLM's vllm: names:
# each equal to the kvtier_ series it comes from, the exposition still clean
# (tests/promcheck.py); --metrics-names kvtier leaves only kvtier's own.
# Needs curl and python3.
set -u
command -v curl >/dev/null || { echo "SKIP: needs curl"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: needs python3 for tests/promcheck.py"; exit 77; }
HERE=${KVT_SRC:?KVT_SRC must point to the source tree}/tests
. "$(dirname "$0")/../testutil.sh"

"$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 >/dev/null 2>&1 ||
  { echo "mkmodel failed"; exit 1; }
KVT_SERVE_ARGS=(-m "$TMP/m.gguf" --host 127.0.0.1 -t 1)
LONG="The quick brown fox jumps over the lazy dog while the cache keeps every block it has seen before, so a repeat is cheap."
# v NAME: the value of the unlabelled series NAME in $TMP/metrics (summed over its labels otherwise)
v() { awk -v n="$1" '$1 == n || index($1, n "{") == 1 { s += $2 } END { printf "%.6g\n", s }' "$TMP/metrics"; }
work() { # two requests, the second reusing the first's prompt
  for _ in 1 2; do post /v1/completions "{\"prompt\": \"$LONG\", \"max_tokens\": 8, \"temperature\": 0}"; done
  curl -s -m 10 "$URL/metrics" >"$TMP/metrics"
}

check "a bad --metrics-names is a usage error" expect_rc 2 "$BIN" serve --metrics-names prometheus
check "... naming the choices" grep -q 'llamacpp, vllm or kvtier' "$TMP/out"

kvt_start_server plain
work
check "the exposition is clean" python3 "$HERE/promcheck.py" "$TMP/metrics"
for name in prompt_tokens_total prompt_seconds_total tokens_predicted_total tokens_predicted_seconds_total \
  n_decode_total n_busy_slots_per_decode prompt_tokens_seconds predicted_tokens_seconds kv_cache_usage_ratio \
  kv_cache_tokens requests_processing requests_deferred; do
  check "llamacpp:$name is there, typed" grep -q "^# TYPE llamacpp:$name " "$TMP/metrics"
done
check "llamacpp:tokens_predicted_total = kvtier_generated_tokens_total" \
  is "$(v llamacpp:tokens_predicted_total)" "$(v kvtier_generated_tokens_total)"
check "... which counts both replies" gt "$(v llamacpp:tokens_predicted_total)" 8
check "llamacpp:prompt_tokens_total = the computed prompt tokens" \
  is "$(v llamacpp:prompt_tokens_total)" "$(v kvtier_computed_tokens_total)"
check "... fewer than the prompts' tokens: the repeat was cached" \
  lt "$(v llamacpp:prompt_tokens_total)" "$(v kvtier_prompt_tokens_total)"
check "llamacpp:requests_processing = kvtier_sequences_active" \
  is "$(v llamacpp:requests_processing)" "$(v kvtier_sequences_active)"
check "llamacpp:requests_deferred = kvtier_queue_depth" is "$(v llamacpp:requests_deferred)" "$(v kvtier_queue_depth)"
check "llamacpp:n_decode_total counts engine steps" ge "$(v llamacpp:n_decode_total)" 16
check "llamacpp:kv_cache_usage_ratio is a share" \
  python3 -c "import sys; r = float(sys.argv[1]); sys.exit(not 0 < r <= 1)" "$(v llamacpp:kv_cache_usage_ratio)"
check "no vllm: names unless asked" bash -c "! grep -q '^vllm:' '$TMP/metrics'"
kvt_stop_server plain

kvt_start_server vllm --metrics-names llamacpp,vllm
work
check "with vllm: the exposition is clean" python3 "$HERE/promcheck.py" "$TMP/metrics"
check "llamacpp: names stay" grep -q '^llamacpp:tokens_predicted_total ' "$TMP/metrics"
check "vllm:prefix_cache_hits_total = the cached tokens of every tier" \
  is "$(v vllm:prefix_cache_hits_total)" "$(v kvtier_cached_tokens_total)"
check "... some of them" gt "$(v vllm:prefix_cache_hits_total)" 0
check "vllm:prefix_cache_queries_total = the prompt tokens" \
  is "$(v vllm:prefix_cache_queries_total)" "$(v kvtier_prompt_tokens_total)"
check "vllm:time_to_first_token_seconds counts what kvtier's histogram does" \
  is "$(v vllm:time_to_first_token_seconds_count)" "$(v kvtier_time_to_first_token_seconds_count)"
check "vllm:time_per_output_token_seconds: a gap per token after the first" \
  is "$(v vllm:time_per_output_token_seconds_count)" "$(($(v kvtier_generated_tokens_total) - 2))"
check "vllm:kv_cache_usage_perc = llamacpp:kv_cache_usage_ratio" \
  is "$(v vllm:kv_cache_usage_perc)" "$(v llamacpp:kv_cache_usage_ratio)"
check "vllm:num_requests_running and waiting" is "$(v vllm:num_requests_running)/$(v vllm:num_requests_waiting)" \
  "$(v kvtier_sequences_active)/$(v kvtier_queue_depth)"
kvt_stop_server vllm

kvt_start_server own --metrics-names kvtier
work
check "--metrics-names kvtier: kvtier's names only" bash -c "! grep -q '^llamacpp:\|^vllm:' '$TMP/metrics'"
check "... which are all there" grep -q '^kvtier_generated_tokens_total ' "$TMP/metrics"
kvt_stop_server own

kvt_test_done test_server_metric_names
