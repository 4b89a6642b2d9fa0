#!/bin/bash
# `kvtier eval` end to end: the JSON line for aidreams260K's reference prompts
# (fed as token ids) matches llama.cpp's: same tokens, same top-5 ids up to
# near-ties, logits within the engine test's tolerance, identical greedy text.
# Also checks `run`/`eval` usage errors.
set -u
BIN=${KVT_BIN:?KVT_BIN not set}
SHARED=${KVT_SHARED:-../shared}
REF=$SHARED/reference/aidreams260K.jsonl
MODEL=$SHARED/models/aidreams260K.gguf
[ -f "$REF" ] && [ -f "$MODEL" ] || { echo "SKIP: no reference assets"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 needed to compare JSON"; exit 77; }
fail=0

"$BIN" eval --help | grep -q -- '--tokens' || { echo "eval --help lacks --tokens"; fail=1; }
"$BIN" run --help | grep -q -- '--top-p' || { echo "run --help lacks --top-p"; fail=1; }
"$BIN" eval --tokens "1 2" >/dev/null 2>&1; [ $? -eq 2 ] || { echo "eval without -m should exit 2"; fail=1; }
"$BIN" run -m "$MODEL" >/dev/null 2>&1; [ $? -eq 2 ] || { echo "run without -p should exit 2"; fail=1; }
"$BIN" eval -m "$MODEL" --tokens "1 99999" >/dev/null 2>&1; [ $? -eq 2 ] || { echo "out-of-vocab token should exit 2"; fail=1; }

while IFS= read -r line; do
    toks=$(python3 -c 'import json,sys; print(" ".join(map(str, json.loads(sys.argv[1])["prompt_tokens"])))' "$line")
    n=$(python3 -c 'import json,sys; print(len(json.loads(sys.argv[1])["greedy"]))' "$line")
    out=$("$BIN" eval -m "$MODEL" -t 2 -n "$n" --tokens "$toks") || { echo "eval failed"; fail=1; continue; }
    python3 - "$line" "$out" <<'PY' || fail=1
import json, sys
ref, got = json.loads(sys.argv[1]), json.loads(sys.argv[2])
TOL = 2e-3  # REF_TOL_AIDREAMS in test_engine.c
assert got["prompt_tokens"] == ref["prompt_tokens"], "prompt tokens differ"
assert len(got["prompt_logits_top5"]) == len(ref["prompt_logits_top5"])
for p, (g, r) in enumerate(zip(got["prompt_logits_top5"], ref["prompt_logits_top5"])):
    for (gi, gl), (ri, rl) in zip(g, r):
        assert abs(gl - rl) <= TOL and (gi == ri or abs(gl - rl) <= TOL), f"pos {p}: {g} vs {r}"
assert got["greedy"] == ref["greedy"], f"greedy differs: {got['greedy']} vs {ref['greedy']}"
print("ok:", ref["prompt"])
PY
done < "$REF"
exit $fail
