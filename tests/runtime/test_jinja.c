// SPDX-License-Identifier: MIT
/* The Jinja interpreter renders real chat templates (tests/runtime/jinja:
 * Llama 2, Llama 3.1 with tools, Mistral, Qwen 2.5 and Qwen3, Gemma 2 and 3,
 * Phi-3 (also as a GGUF ships it), Phi-4, DeepSeek-R1) exactly as Python's
 * jinja2 does with Hugging Face's settings, byte for byte, failing where it
 * fails (expected.json, made by make_expected.py there); and a hostile
 * template stops at a limit with an error that names it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common.h"
#include "jinja.h"
#include "jinja_ref.h"
#include "testutil.h"

static char dir[4096];

static void test_references(void) {
    cJSON *exp = NULL, *cases = NULL;
    if (!jinja_ref_load(dir, &exp, &cases)) return;
    int n_ok = 0, n_err = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, exp) {
        const char *tn = cJSON_GetObjectItem(e, "template")->valuestring;
        const char *cn = cJSON_GetObjectItem(e, "case")->valuestring;
        kvt_jinja *t = jinja_ref_template(dir, tn);
        cJSON *vars = jinja_ref_case_vars(cases, cn);
        char *out = NULL;
        size_t n = 0;
        int rc = t ? kvt_jinja_render(t, vars, NULL, &out, &n) : -1;
        const cJSON *want = cJSON_GetObjectItem(e, "output");
        if (want) {
            CHECKF(rc == 0, "%s/%s: %s", tn, cn, kvt_errmsg());
            CHECKF(out && n == strlen(want->valuestring) && !strcmp(out, want->valuestring),
                   "%s/%s renders\n---\n%s\n--- where jinja2 renders\n%s\n---", tn, cn, out ? out : "",
                   want->valuestring);
            n_ok++;
        } else {
            CHECKF(rc != 0, "%s/%s renders where jinja2 fails (%s)", tn, cn,
                   cJSON_GetObjectItem(e, "error")->valuestring);
            n_err++;
        }
        free(out);
        cJSON_Delete(vars);
        kvt_jinja_free(t);
    }
    CHECKF(n_ok >= 50 && n_err >= 5, "%d renderings, %d failures compared", n_ok, n_err);
    cJSON_Delete(exp);
    cJSON_Delete(cases);
}

/* Renders src with vars (JSON text); returns the output or NULL (rc in *rc). */
static char *render(const char *src, const char *vars_json, const kvt_jinja_limits *lim, int *rc) {
    kvt_jinja *t = NULL;
    char *out = NULL;
    size_t n;
    *rc = kvt_jinja_parse(src, strlen(src), &t);
    if (*rc) return NULL;
    cJSON *vars = cJSON_Parse(vars_json ? vars_json : "{}");
    *rc = kvt_jinja_render(t, vars, lim, &out, &n);
    cJSON_Delete(vars);
    kvt_jinja_free(t);
    return out;
}

static void expect(const char *src, const char *vars, const char *want) {
    int rc;
    char *out = render(src, vars, NULL, &rc);
    CHECKF(rc == 0 && out && !strcmp(out, want), "%s -> '%s' (%s), want '%s'", src, out ? out : "",
           rc ? kvt_errmsg() : "ok", want);
    free(out);
}

static void expect_fail(const char *src, const kvt_jinja_limits *lim, int code, const char *msg) {
    int rc;
    char *out = render(src, NULL, lim, &rc);
    CHECKF(rc == code && strstr(kvt_errmsg(), msg), "%s: rc %d, '%s'; want %d and '%s'", src, rc, kvt_errmsg(), code,
           msg);
    free(out);
}

static void test_language(void) {
    expect("{{ 'abc'[::-1] }}|{{ [1,2,3][1:] }}|{{ 'héllo'[1:3] }}|{{ 'héllo'|length }}", NULL, "cba|[2, 3]|él|5");
    expect("{% for k, v in d.items() %}{{ k }}={{ v }}{{ ',' if not loop.last }}{% endfor %}",
           "{\"d\":{\"a\":1,\"b\":2.5}}", "a=1,b=2.5");
    expect("{% set ns = namespace(n=0) %}{% for i in range(5) %}{% if i == 3 %}{% break %}{% endif %}"
           "{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}",
           NULL, "3");
    expect("{% macro m(a, b='x') %}[{{ a }}{{ b }}]{% endmacro %}{{ m(1) }}{{ m(2, b='y') }}", NULL, "[1x][2y]");
    expect("{{ x | default('d') }} {{ none is none }} {{ 3 is number }} {{ 'a' ~ 1 ~ true }} {{ 7 // 2 }} {{ -7 % 3 }}",
           NULL, "d True True a1True 3 2");
    expect("{{ xs | selectattr('on') | map(attribute='n') | join(',') }}|{{ xs | rejectattr('on') | list | length }}",
           "{\"xs\":[{\"n\":\"a\",\"on\":true},{\"n\":\"b\",\"on\":false},{\"n\":\"c\",\"on\":true}]}", "a,c|1");
    expect("{{ ' a b '.split() }}{{ 'a,b'.split(',') | last }}{{ 'Hi'.upper() }}{{ 'x'.startswith(('y','x')) }}", NULL,
           "['a', 'b']bHITrue");
    /* rsplit cuts from the end; a whitespace split's rest keeps its far side's spaces, as Python's */
    expect("{{ 'a.b.c'.rsplit('.', 1) }}{{ 'a.b.c'.split('.', 1) }}{{ 'aaa'.rsplit('aa') }}{{ 'x'.rsplit('x') }}", NULL,
           "['a.b', 'c']['a', 'b.c']['a', '']['', '']");
    expect("{{ 'a b  c  '.split(none, 1) }}{{ '  a b '.rsplit(none, 1) }}{{ ' x '.split(none, 0) }}|{{ ' '.rsplit() }}",
           NULL, "['a', 'b  c  ']['  a', 'b']['x ']|[]");
    expect("{{ 'a b c'.split(' ', maxsplit=1) }}{{ 'a,b,c'.rsplit(sep=',', maxsplit=1) }}{{ ' x '.split(maxsplit=0) }}",
           NULL, "['a', 'b c']['a,b', 'c']['x ']");
    expect(
        "{{ 2 is gt 1 }}{{ 2 is ge 2 }}{{ 2 is lt 1 }}{{ 'a' is le 'b' }}{{ [1, 5, 9] | select('greaterthan', 4) | list }}"
        "{{ [1, 5, 9] | reject('lessthan', 5) | list }}",
        NULL, "TrueTrueFalseTrue[5, 9][5, 9]");
    expect("{{ 'x' is in 'xyz' }}{{ 'k' is in ({'k': 1}) }}{{ [1, 2] | select('in', [2, 3]) | list }}", NULL,
           "TrueTrue[2]");
    /* integers stay integers, and stay exact: what does not fit in 64 bits is an error, not a
     * wrap-around or a trap (INT64_MIN // -1 would kill the process) */
    expect("{{ 2 ** 10 }} {{ 2 ** -1 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ (-4611686018427387904 * 2) % -1 }}", NULL,
           "1024 0.5 2 -2 0");
    expect_fail("{{ (-4611686018427387904 * 2) // -1 }}", NULL, KVT_EFORMAT, "does not fit in 64 bits");
    expect_fail("{{ -(-4611686018427387904 * 2) }}", NULL, KVT_EFORMAT, "does not fit in 64 bits");
    expect_fail("{{ (-4611686018427387904 * 2) | abs }}", NULL, KVT_EFORMAT, "does not fit in 64 bits");
    expect_fail("{{ 4611686018427387904 * 2 }}", NULL, KVT_EFORMAT, "does not fit in 64 bits");
    expect_fail("{{ 4611686018427387904 + 4611686018427387904 }}", NULL, KVT_EFORMAT, "does not fit in 64 bits");
    expect_fail("{{ 3 ** 40 }}", NULL, KVT_EFORMAT, "does not fit in 64 bits");
    /* range's length and |int of a float at the edges: a limit or Python's answer, not C's overflow */
    expect_fail("{{ range(-4611686018427387904 * 2, 4611686018427387903 * 2) | length }}", NULL, KVT_ELIMIT,
                "range is longer");
    expect("{{ range(0, 10, 4611686018427387903 * 2) | list }}{{ range(5, -4611686018427387904 * 2, -4611686018427387904 "
           "* 2) | list }}{{ '1e999' | int }}{{ 'nan' | int(7) }}{{ -3.7 | int }}",
           NULL, "[0][5, -9223372036854775803]07-3");
    expect_fail("{{ 1e19 | int }}", NULL, KVT_EFORMAT, "does not fit in 64 bits");
    expect("{{ -3 | abs }}{{ -2.5 | abs }}{{ true | abs }}{{ -x | string | length }}", "{\"x\":12}", "32.513");
    expect_fail("{{ 'ab' | abs }}", NULL, KVT_EFORMAT, "abs needs a number, not string"); /* not the string's address */
    expect_fail("{{ none | abs }}", NULL, KVT_EFORMAT, "abs needs a number");
    expect("{{ {'k': [1, none, 'é\"']} | tojson }}", NULL, "{\"k\": [1, null, \"é\\\"\"]}");
    expect("{{ {'b': 1, 'a': [1, 2]} | tojson(separators=(',', ':')) }}|{{ {'a': 1} | tojson(indent=1) }}|"
           "{{ [1, {'a': 2}] | tojson(indent=1, separators=(';', '=')) }}",
           NULL, "{\"b\":1,\"a\":[1,2]}|{\n \"a\": 1\n}|[\n 1;\n {\n  \"a\"=2\n }\n]");
    expect("  {%- if true %}\n  x\n  {% endif %}\n{# c #}\ny", NULL, "  x\ny");
    expect("{{ d.get('a', 5) }}{{ d.b is defined }}{{ 'ab' in 'xaby' }}{{ 2 not in [1] }}", "{\"d\":{}}",
           "5FalseTrueTrue");
}

static void test_limits(void) {
    kvt_jinja_limits lim = kvt_jinja_default_limits();
    lim.max_steps = 100000;
    expect_fail("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", &lim, KVT_ELIMIT,
                "steps");
    expect_fail("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, KVT_ELIMIT, "nest more than");
    lim = kvt_jinja_default_limits();
    lim.max_output = 1000;
    expect_fail("{% for i in range(1000) %}xx{% endfor %}", &lim, KVT_ELIMIT, "longer than 1000 bytes");
    lim = kvt_jinja_default_limits();
    lim.max_memory = 1 << 20;
    expect_fail("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", &lim,
                KVT_ELIMIT, "bytes of values");
    expect_fail("{{ raise_exception('roles must alternate') }}", NULL, KVT_EFORMAT, "roles must alternate");
    expect_fail("{% if x %}never closed", NULL, KVT_EFORMAT, "line 1");
    expect_fail("{{ x.y.z }}", NULL, KVT_EFORMAT, "undefined");
    char deep[4096] = "{{ ";
    for (int i = 0; i < 1000; i++) strcat(deep, "(");
    expect_fail(deep, NULL, KVT_EFORMAT, "nest more than");
}

int main(void) {
    const char *src = getenv("KVT_SRC");
    snprintf(dir, sizeof dir, "%s/tests/runtime/jinja", src ? src : ".");
    test_references();
    test_language();
    test_limits();
    return kvt_test_done("test_jinja");
}
