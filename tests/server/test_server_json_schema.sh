#!/usr/bin/env bash
# JSON Schema as zod and Pydantic write it, end to end over loopback on a
# random-weight model (noise unless the mask constrains it): a nested object
# with an email, a uuid, a date-time, an enum, a positive number, an array
# with minItems of patterned strings, a discriminated oneOf and a recursive
# $ref, through response_format over many seeds, llama.cpp's json_schema on
# /v1/completions, and a forced tool call with the same parameters; then each
# Pydantic v2 schema of tests/reference/schemas over three seeds. Every
# output must finish (finish_reason stop) and validate: with python3's
# jsonschema when it is installed, and always with a small checker of the
# standard library below. Refusals name the keyword and the path.
# Needs curl, jq and python3.
set -u
command -v curl >/dev/null && command -v jq >/dev/null && command -v python3 >/dev/null ||
  { echo "SKIP: needs curl, jq and python3"; exit 77; }
. "$(dirname "$0")/../testutil.sh"
has() { grep -q -- "$2" <<<"$1" || { echo "  '$1' lacks '$2'" >&2; return 1; }; }

"$BIN" mkmodel -o "$TMP/m.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ff 128 >/dev/null 2>&1 || { echo "mkmodel failed"; exit 1; }
KVT_SERVE_ARGS=(-m "$TMP/m.gguf" -t 1 -c 4096) # the tool prompt holds the schema: ~1.8k tokens

# an order (tests/reference/schemas/order.json): a nested object with formats, bounds,
# a patterned array, a discriminated oneOf, a nullable field and a recursive $ref
SCHEMA=$(jq -c . "$KVT_SRC/tests/reference/schemas/order.json")
echo "$SCHEMA" >"$TMP/schema.json"

# check.py SCHEMA DOC: exit 0 when DOC (a JSON text) is valid under SCHEMA
cat >"$TMP/check.py" <<'PY'
import datetime, json, re, sys, uuid

def fmt_ok(f, s):
    if f == "email":
        return re.fullmatch(r"(?!\.)(?!.*\.\.)[A-Za-z0-9_'+\-.]*[A-Za-z0-9_+-]@([A-Za-z0-9][A-Za-z0-9\-]*\.)+[A-Za-z]{2,}", s)
    if f == "uuid":
        return re.fullmatch(r"[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}", s) and uuid.UUID(s)
    if f == "date":
        return re.fullmatch(r"\d{4}-\d\d-\d\d", s) and datetime.date.fromisoformat(s)
    if f == "date-time":
        m = re.fullmatch(r"(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)", s)
        return m and datetime.date.fromisoformat(m[1]) and datetime.time.fromisoformat(m[2])
    return False

def check(v, s, root):
    """True when v is valid under schema s (the keywords this test uses)."""
    if "$ref" in s:
        t = root
        for part in s["$ref"].lstrip("#").split("/")[1:]:
            t = t[part]
        return check(v, t, root)
    if "const" in s and v != s["const"]: return False
    if "enum" in s and v not in s["enum"]: return False
    if "anyOf" in s and not any(check(v, b, root) for b in s["anyOf"]): return False
    if "oneOf" in s and sum(check(v, b, root) for b in s["oneOf"]) != 1: return False
    t = s.get("type")
    kinds = {"object": dict, "array": list, "string": str, "null": type(None), "boolean": bool}
    if t in kinds and not isinstance(v, kinds[t]): return False
    if t in ("number", "integer"):
        if isinstance(v, bool) or not isinstance(v, (int, float)): return False
        if t == "integer" and v != int(v): return False
        if "minimum" in s and v < s["minimum"]: return False
        if "maximum" in s and v > s["maximum"]: return False
        if "exclusiveMinimum" in s and v <= s["exclusiveMinimum"]: return False
        if "exclusiveMaximum" in s and v >= s["exclusiveMaximum"]: return False
    if isinstance(v, dict) and t == "object":
        props = s.get("properties", {})
        if any(k not in v for k in s.get("required", [])): return False
        for k, x in v.items():
            if k in props:
                if not check(x, props[k], root): return False
            elif s.get("additionalProperties") is False: return False
            elif isinstance(s.get("additionalProperties"), dict) and not check(x, s["additionalProperties"], root):
                return False
    if isinstance(v, list) and t == "array":
        if len(v) < s.get("minItems", 0) or len(v) > s.get("maxItems", 1 << 30): return False
        pre = s.get("prefixItems", [])
        if not all(check(x, p, root) for x, p in zip(v, pre)): return False
        if not all(check(x, s.get("items", {}), root) for x in v[len(pre):]): return False
    if isinstance(v, str) and t == "string":
        if not s.get("minLength", 0) <= len(v) <= s.get("maxLength", 1 << 30): return False
        if "pattern" in s and not re.search(s["pattern"], v): return False
        if "format" in s and not fmt_ok(s["format"], v): return False
    return True

schema = json.load(open(sys.argv[1]))
doc = json.loads(sys.argv[2])
ok = check(doc, schema, schema)
try:
    import jsonschema
    v = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    errors = [e.message for e in v.iter_errors(doc)]
    if errors:
        print("jsonschema:", errors, file=sys.stderr)
        ok = False
except ImportError:
    pass
if not ok:
    print("invalid:", sys.argv[2], file=sys.stderr)
sys.exit(0 if ok else 1)
PY
valid_under() { python3 "$TMP/check.py" "$1" "$2"; }
valid() { valid_under "$TMP/schema.json" "$1"; }
invalid() { ! valid "$1" 2>/dev/null; }
invalid_under() { ! valid_under "$1" "$2" 2>/dev/null; }

check "the checker refuses a bad email" invalid '{"user":{"email":"x","id":"123e4567-e89b-42d3-a456-426614174000","role":"user"},"price":1,"qty":1,"tags":["a"],"when":"2024-01-01T00:00:00Z","pay":{"kind":"cash"},"note":null,"tree":{"n":0,"kids":[]}}'
check "the checker takes a good document" valid '{"user":{"email":"a@b.co","id":"123e4567-e89b-42d3-a456-426614174000","role":"user"},"price":0.5,"qty":99,"tags":["a"],"when":"2024-01-01T00:00:00Z","pay":{"kind":"card","last4":"1234"},"note":"hi","tree":{"n":-3,"kids":[{"n":3,"kids":[]}]}}'

kvt_start_server main -np 2
MSG='"messages":[{"role":"user","content":"An order, in JSON."}]'
good=0 stopped=0
for seed in $(seq 1 6); do
  post /v1/chat/completions "{$MSG,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"order\",\"strict\":true,\"schema\":$SCHEMA}},\"max_tokens\":500,\"seed\":$seed}"
  [ "$CODE" = 200 ] && [ "$(jb '.choices[0].finish_reason')" = stop ] && stopped=$((stopped + 1))
  [ "$CODE" = 200 ] && valid "$(jb '.choices[0].message.content')" && good=$((good + 1))
done
check "response_format: 6 of 6 seeds finish" is "$stopped" 6
check "... and 6 of 6 validate (formats, bounds, oneOf, \$ref recursion)" is "$good" 6

post /v1/completions "{\"prompt\":\"Order:\",\"json_schema\":$SCHEMA,\"max_tokens\":500,\"seed\":3}"
check "llama.cpp's json_schema on /v1/completions validates" valid "$(jb '.choices[0].text')"

# llama-server's json_object with a schema: the reply follows the schema (a string here, not an object)
post /v1/chat/completions "{$MSG,\"response_format\":{\"type\":\"json_object\",\"schema\":$SCHEMA},\"max_tokens\":500,\"seed\":2}"
check "response_format json_object with a schema validates" valid "$(jb '.choices[0].message.content')"
STR='{"type":"string","minLength":3,"maxLength":5}'
echo "$STR" >"$TMP/str.json"
post /v1/chat/completions "{$MSG,\"response_format\":{\"type\":\"json_object\",\"schema\":$STR},\"max_tokens\":60,\"seed\":1}"
check "... a string schema gives a string of 3 to 5 characters" valid_under "$TMP/str.json" "$(jb '.choices[0].message.content')"
post /v1/chat/completions "{$MSG,\"response_format\":{\"type\":\"json_object\",\"schema\":\"x\"},\"max_tokens\":6}"
check "... a schema that is not an object is a 400 naming it" is "$CODE/$(jb .error.param)" 400/response_format.schema

TOOLS="[{\"type\":\"function\",\"function\":{\"name\":\"place_order\",\"parameters\":$SCHEMA}}]"
good=0
for seed in 1 2; do
  post /v1/chat/completions "{$MSG,\"tools\":$TOOLS,\"tool_choice\":\"required\",\"max_tokens\":500,\"seed\":$seed}"
  [ "$CODE" = 200 ] && valid "$(jb '.choices[0].message.tool_calls[0].function.arguments')" && good=$((good + 1))
done
check "a forced tool call's arguments validate, 2 of 2 seeds" is "$good" 2

# Pydantic v2's schemas as model_json_schema() writes them ($defs, Optional as anyOf with
# null, enums, nested and self-referring models, a discriminated union), one file each
# under tests/reference/schemas: the checker takes each file's example (and refuses it
# with every field wrapped in an array), and every reply
# finishes and validates
n_files=0
for f in "$KVT_SRC"/tests/reference/schemas/pydantic_*.json; do
  name=$(basename "$f" .json) n_files=$((n_files + 1))
  check "$name: the checker takes its example" valid_under "$f" "$(jq -c '.examples[0]' "$f")"
  check "... and refuses it with a wrong type in every field" invalid_under "$f" "$(jq -c '.examples[0] | map_values([.])' "$f")"
  good=0 stopped=0
  for seed in 1 2 3; do
    post /v1/chat/completions "$(jq -c --slurpfile s "$f" --argjson seed "$seed" -n \
      '{messages: [{role: "user", content: "One record, in JSON."}], max_tokens: 400, seed: $seed,
        response_format: {type: "json_schema", json_schema: {name: "m", strict: true, schema: $s[0]}}}')"
    [ "$CODE" = 200 ] || echo "  $name seed $seed: HTTP $CODE $(cat "$TMP/body")" >&2
    [ "$CODE" = 200 ] && [ "$(jb '.choices[0].finish_reason')" = stop ] && stopped=$((stopped + 1))
    [ "$CODE" = 200 ] && valid_under "$f" "$(jb '.choices[0].message.content')" && good=$((good + 1))
  done
  check "$name: 3 of 3 seeds finish" is "$stopped" 3
  check "$name: 3 of 3 validate" is "$good" 3
done
check "the Pydantic schemas are there (3 files)" is "$n_files" 3

# ---- refusals: the keyword (or feature) and where it is ----------------------------------------
post /v1/chat/completions "{$MSG,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"object\",\"properties\":{\"v\":{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\"}]}}}}}}"
check "an overlapping oneOf is a 400" is "$CODE/$(jb .error.param)" 400/response_format
check "... naming oneOf and its path" has "$(jb .error.message)" "'oneOf': branches 0 and 1 may both match (give each branch a required property with its own 'const', or use 'anyOf') at /properties/v"
post /v1/chat/completions "{$MSG,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"object\",\"properties\":{\"r\":{\"type\":\"number\",\"minimum\":0.5}}}}}}"
check "a fractional bound on a number is a 400 naming it and its path" has "$(jb .error.message)" "'minimum' of 0.5 for a number.* at /properties/r"
post /v1/chat/completions "{$MSG,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"\$ref\":\"#\"}},\"required\":[\"a\"]}}}}"
check "a recursion that cannot stop is a 400" has "$(jb .error.message)" "no finite value"
post /v1/chat/completions "{$MSG,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"number\",\"exclusiveMinimum\":0}}},\"max_tokens\":20,\"seed\":1}"
check "z.number().positive() at the top level is accepted" is "$CODE" 200
check "... and gives a positive number" python3 -c "import sys; v = float(sys.argv[1]); sys.exit(0 if v > 0 else 1)" "$(jb '.choices[0].message.content')"

kvt_stop_server main
kvt_test_done test_server_json_schema
