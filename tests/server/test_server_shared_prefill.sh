#!/usr/bin/env bash
# Requests that arrive together and share a prefix compute it once: four
# completions with a common 200-token prefix and different suffixes, sent at
# the same instant to a fresh `serve --parallel 4 --block-size 16`, are all
# admitted before any of them is computed; the first one prefilled computes
# its whole prompt, and each of the others, when its own prefill begins,
# takes the prefix's 12 full blocks (192 tokens) that the first committed
# meanwhile instead of computing them again (late reuse). So the four compute
# the sum of their prompts less 3 x 192 tokens, exactly, however the requests
# interleave: one that arrives after the first's prefill gets the same blocks
# at admission. Each reply (greedy: text and logprobs) must equal the same
# request's reply, run alone and cold on another fresh server, and /metrics
# must count what the replies report. The same then holds for a request of
# n = 2 choices beside a plain one (the choices fork from the late-reused
# prompt) and another tenant's (its cache_salt keeps it apart). Needs
# python3, jq and curl.
set -u
. "$(dirname "$0")/../testutil.sh"
command -v python3 >/dev/null && command -v jq >/dev/null && command -v curl >/dev/null ||
  { echo "SKIP: needs python3 (to send the requests together), jq and curl"; exit 77; }
# mkmodel's default size (dim 256, 4 layers): a prompt takes long enough to compute (tens of ms) that
# the four arrive while the first is prefilled, so the late reuse is what the checks see
"$BIN" mkmodel -o "$TMP/m.gguf" --ctx 1024 >/dev/null 2>&1 || { echo "mkmodel failed"; exit 1; }
# prefill chunks of 5 blocks commit blocks 0-9, then 0-12 and on: never the prefix's 12 blocks alone,
# so a request's reuse stop (explained when its reuse is final) always sees the first one's 13th block
# (the prefix's last 8 tokens, then its suffix) as the cached continuation its own diverges from
KVT_SERVE_ARGS=(-m "$TMP/m.gguf" --host 127.0.0.1 -t 1 --parallel 4 --block-size 16 --prefill-chunk 80)

# send URL MODE OUT BODY...: each body to /v1/completions, all at once (MODE together: connected
# first, then sent past one barrier) or one after another (alone: each connects when its turn comes,
# since the server closes a connection that sends nothing for 10 s); one JSON line per reply in OUT
send() {
  python3 - "$@" <<'EOF'
import http.client, json, sys, threading, urllib.parse
url, mode, out, bodies = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
u = urllib.parse.urlparse(url)
conns = [http.client.HTTPConnection(u.hostname, u.port, timeout=120) for _ in bodies]
if mode == "together":
    for c in conns:
        c.connect()
gate = threading.Barrier(len(bodies))
replies = [None] * len(bodies)
def one(i):
    if mode == "together":
        gate.wait()
    conns[i].request("POST", "/v1/completions", bodies[i], {"Content-Type": "application/json"})
    replies[i] = conns[i].getresponse().read().decode()
if mode == "together":
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(bodies))]
    for t in threads: t.start()
    for t in threads: t.join()
else:
    for i in range(len(bodies)): one(i)
with open(out, "w") as f:
    for r in replies: f.write(json.dumps(json.loads(r)) + "\n")
EOF
}
# body I [EXTRA_JSON]: the shared 200-token prefix, then I's own suffix of 10 + 3I tokens (its first
# token differs from every other suffix's), 8 greedy tokens with their logprobs
body() {
  python3 -c '
import json, sys
i, extra = int(sys.argv[1]), json.loads("{" + sys.argv[2] + "}")
prefix = [(7 * k + 3) % 200 + 10 for k in range(200)]
suffix = [210 + i] + [(31 * i + 13 * k) % 200 + 10 for k in range(9 + 3 * i)]
print(json.dumps(dict({"prompt": prefix + suffix, "max_tokens": 8, "temperature": 0, "logprobs": 3}, **extra)))' "$1" "${2:-}"
}
# reply FILE LINE: that reply's texts and logprobs, as exact bytes
reply() { sed -n "$2p" "$1" | jq -c '[.choices[] | [.text, .logprobs]]'; }
metric() { curl -s "$URL/metrics" | awk -v k="$1" '$1 == k { print $2 }'; }
sum() { jq -s "map($2) | add" "$1"; }

# ---- the reference: each request alone and cold (its own cache_salt) on a fresh server ----------
kvt_start_server solo
send "$URL" alone "$TMP/solo.jsonl" "$(body 0 '"cache_salt":"s0"')" "$(body 1 '"cache_salt":"s1"')" \
  "$(body 2 '"cache_salt":"s2"')" "$(body 3 '"cache_salt":"s3"')" "$(body 4 '"cache_salt":"s4","n":2')"
check "the reference requests were cold" is "$(sum "$TMP/solo.jsonl" .kvtier.cached_tokens)" 0
check "the replies differ (the prompts do)" is "$(for i in 1 2 3 4; do reply "$TMP/solo.jsonl" "$i"; done | sort -u | wc -l)" 4
kvt_stop_server solo

# ---- four together on a fresh server -----------------------------------------------------------
kvt_start_server together
send "$URL" together "$TMP/tog.jsonl" "$(body 0)" "$(body 1)" "$(body 2)" "$(body 3)"
prompts=$(sum "$TMP/tog.jsonl" .usage.prompt_tokens)
check "four prompts of 210, 213, 216 and 219 tokens" is "$prompts" 858
check "the prefix is computed once: computed = prompts - 3 x 192" \
  is "$(sum "$TMP/tog.jsonl" .kvtier.computed_tokens)" $((prompts - 3 * 192))
check "three requests took the prefix's 12 blocks from T0, one computed them" \
  is "$(jq -c .kvtier.cached_tokens_by_tier.T0 "$TMP/tog.jsonl" | sort -n | tr '\n' ' ')" "0 192 192 192 "
check "cached + computed = prompt in every report" \
  is "$(jq -s 'map(select(.kvtier.cached_tokens + .kvtier.computed_tokens == .usage.prompt_tokens)) | length' \
    "$TMP/tog.jsonl")" 4
check "OpenAI's cached_tokens says the same" \
  is "$(sum "$TMP/tog.jsonl" .usage.prompt_tokens_details.cached_tokens)" $((3 * 192))
check "the three stop where their suffixes diverge (token 200), the first where nothing was cached" \
  is "$(jq -r '.kvtier.reuse_stop | "\(.reason)@\(.token_offset)"' "$TMP/tog.jsonl" | sort | tr '\n' ' ')" \
  "diverged@200 diverged@200 diverged@200 never_seen@0 "
late=$(sum "$TMP/tog.jsonl" '(.kvtier.late_cached_tokens // 0)')
check "late_cached_tokens counts whole blocks, 3 x 192 at most" [ $((late % 16)) -eq 0 -a "$late" -le 576 ]
echo "note: $late of the 576 cached tokens were taken as their prefill began (the rest at admission)"
n=0
for i in 1 2 3 4; do [ "$(reply "$TMP/tog.jsonl" "$i")" = "$(reply "$TMP/solo.jsonl" "$i")" ] && n=$((n + 1)); done
check "each reply = the same request alone and cold (text and logprobs, $n/4)" is "$n" 4
check "/metrics: computed tokens" is "$(metric kvtier_computed_tokens_total)" $((prompts - 3 * 192))
check "/metrics: cached tokens in T0" is "$(metric 'kvtier_cached_tokens_total{tier="T0"}')" $((3 * 192))
check "/metrics: cache hit tokens" is "$(metric kvtier_cache_hit_tokens_total)" $((3 * 192))
check "/metrics: misses by the reason each reply reports" \
  is "$(metric 'kvtier_cache_misses_total{reason="diverged"}') $(metric 'kvtier_cache_misses_total{reason="never_seen"}')" "3 1"
check "/metrics: no full reuse" is "$(metric kvtier_cache_full_reuse_total)" 0
kvt_stop_server together

# ---- n = 2 beside a plain request and another tenant's: the choices fork from the prompt, late-reused
# or not; the other tenant (its own cache_salt) shares nothing and computes its whole prompt
kvt_start_server fork
send "$URL" together "$TMP/fork.jsonl" "$(body 0)" "$(body 4 '"n":2')" "$(body 1 '"cache_salt":"other"')"
check "prompts of 210 and 222 tokens, the prefix computed once; the other tenant's 213 all computed" \
  is "$(sum "$TMP/fork.jsonl" .kvtier.computed_tokens)" $((210 + 222 - 192 + 213))
check "the other tenant reused nothing" is "$(sed -n 3p "$TMP/fork.jsonl" | jq .kvtier.cached_tokens)" 0
check "both choices of n = 2 = alone and cold" is "$(reply "$TMP/fork.jsonl" 2)" "$(reply "$TMP/solo.jsonl" 5)"
check "the plain one = alone and cold" is "$(reply "$TMP/fork.jsonl" 1)" "$(reply "$TMP/solo.jsonl" 1)"
check "the other tenant's = alone and cold" is "$(reply "$TMP/fork.jsonl" 3)" "$(reply "$TMP/solo.jsonl" 2)"
kvt_stop_server fork

kvt_test_done test_server_shared_prefill
