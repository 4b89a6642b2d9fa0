// SPDX-License-Identifier: MIT
/* The Jinja interpreter renders real chat templates (tests/runtime/jinja:
 * Llama 2, Llama 3.1 with tools, Mistral, Qwen 2.5 and Qwen3, Gemma 2 and 3,
 * Phi-3 (also as a GGUF ships it), Phi-4, DeepSeek-R1, and the templates of
 * llama.cpp's models/templates in jinja/llama.cpp) exactly as Python's jinja2
 * does with Hugging Face's settings, byte for byte, failing where it fails
 * (expected.json, made by scripts/make_jinja_expected.py); and a hostile template
 * stops at a limit with an error that names it. */
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
        time_t before = time(NULL);
        int rc = t ? kvt_jinja_render(t, vars, NULL, &out, &n) : -1;
        const cJSON *want = cJSON_GetObjectItem(e, "output");
        if (want) {
            CHECKF(rc == 0, "%s/%s: %s", tn, cn, kvt_errmsg());
            char *w = jinja_ref_dates(want->valuestring, before);
            if (out && strcmp(out, w)) free(w), w = jinja_ref_dates(want->valuestring, time(NULL)); /* past midnight */
            CHECKF(out && n == strlen(w) && !strcmp(out, w),
                   "%s/%s renders\n---\n%s\n--- where jinja2 renders\n%s\n---", tn, cn, out ? out : "", w);
            free(w);
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
    CHECKF(n_ok >= 600 && n_err >= 50, "%d renderings, %d failures compared", n_ok, n_err);
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

/* raw blocks, the sorting and aggregate filters, loop.cycle, unpacking, repetition, "%"
 * formatting and str.format, each against the output jinja2 gives with Hugging Face's settings. */
static void test_features(void) {
    expect("a{% raw %}{{ x }}{% if %}{#c#}{% endraw %}b", NULL, "a{{ x }}{% if %}{#c#}b");
    expect("  {% raw %}\n  {{ y }}\n  {% endraw %}\nz", NULL, "\n  {{ y }}\nz");
    expect("{% raw -%}   {{ q }}   {%- endraw %}|{%raw%}{% endfor %}{%endraw%}", NULL, "{{ q }}|{% endfor %}");
    expect(
        "{{ [3, 1, 2] | sort }}{{ [3, 1, 2] | sort(reverse=true) }}{{ ['b', 'A', 'a', 'C'] | sort }}{{ ['b', 'A', 'a', 'C'] | sort(case_sensitive=true) }}{{ [2, 1.5, true] | sort }}",
        NULL, "[1, 2, 3][3, 2, 1]['A', 'a', 'b', 'C']['A', 'C', 'a', 'b'][True, 1.5, 2]");
    expect(
        "{{ xs | sort(attribute='n') | map(attribute='k') | join(',') }}|{{ xs | sort(attribute='n', reverse=true) | map(attribute='k') | join(',') }}|{{ xs | sort(attribute='n,k') | map(attribute='k') | join }}|{{ xs | sort(false, false, 'k') | map(attribute='n') | join }}",
        "{\"xs\":[{\"n\":2,\"k\":\"a\"},{\"n\":1,\"k\":\"b\"},{\"n\":2,\"k\":\"c\"},{\"n\":1,\"k\":\"d\"}]}",
        "b,d,a,c|a,c,b,d|bdac|2121");
    expect(
        "{% for k, v in d | dictsort %}{{ k }}{{ v }}{% endfor %}|{% for k, v in d | dictsort(by='value') %}{{ k }}{% endfor %}|{% for k, v in d | dictsort(reverse=true) %}{{ k }}{% endfor %}|{% for k, v in d | dictsort(true) %}{{ k }}{% endfor %}",
        "{\"d\":{\"b\":1,\"a\":3,\"C\":2}}", "a3b1C2|bCa|Cba|Cab");
    expect(
        "{{ ['a', 'A', 'b', 'a'] | unique | list }}{{ ['a', 'A', 'b'] | unique(case_sensitive=true) | list }}{{ xs | unique(attribute='n') | map(attribute='k') | join }}{{ [1, 1.0, 2] | unique | list }}",
        "{\"xs\":[{\"n\":2,\"k\":\"a\"},{\"n\":1,\"k\":\"b\"},{\"n\":2,\"k\":\"c\"},{\"n\":1,\"k\":\"d\"}]}",
        "['a', 'b']['a', 'A', 'b']ab[1, 2]");
    expect(
        "{{ [3, 1, 2] | min }}{{ [3, 1, 2] | max }}{{ ['b', 'A', 'c'] | min }}{{ ['b', 'A', 'C'] | max }}{{ ['b', 'A', 'C'] | max(case_sensitive=true) }}{{ xs | max(attribute='n') | tojson }}{{ xs | min(attribute='n') | tojson }}|{{ [] | min }}|",
        "{\"xs\":[{\"n\":2,\"k\":\"a\"},{\"n\":1,\"k\":\"b\"},{\"n\":2,\"k\":\"c\"},{\"n\":1,\"k\":\"d\"}]}",
        "13ACb{\"n\": 2, \"k\": \"a\"}{\"n\": 1, \"k\": \"b\"}||");
    expect(
        "{{ [1, 2, 3] | sum }} {{ [1, 2.5] | sum }} {{ xs | sum(attribute='n') }} {{ [1, 2] | sum(start=10) }} {{ [] | sum }} {{ [[1], [2]] | sum(start=[]) }}",
        "{\"xs\":[{\"n\":2,\"k\":\"a\"},{\"n\":1,\"k\":\"b\"},{\"n\":2,\"k\":\"c\"},{\"n\":1,\"k\":\"d\"}]}",
        "6 3.5 6 13 0 [1, 2]");
    expect(
        "{{ 2.5 | round }} {{ 3.5 | round }} {{ 42 | round }} {{ 2.675 | round(2) }} {{ 2.1 | round(method='ceil') }} {{ 2.9 | round(0, 'floor') }} {{ 1234.5 | round(-2) }} {{ -2.5 | round }} {{ 0.125 | round(2) }} {{ 3.14159 | round(3, 'ceil') }} {{ -2.1 | round(method='floor') }} {{ 1250 | round(-2) }} {{ 1350 | round(-2) }} {{ 42 | round(1, 'ceil') }}",
        NULL, "2.0 4.0 42 2.67 3.0 2.0 1200.0 -2.0 0.12 3.142 -3.0 1200 1400 42.0");
    expect("{{ 'Hello, big world! 42 times_x' | wordcount }} {{ '' | wordcount }} {{ 'héllo wörld' | wordcount }}",
           NULL, "5 0 2");
    expect(
        "[{{ 'ab' | center(7) }}][{{ 'abc' | center(6) }}][{{ 'ab' | center(1) }}][{{ 'ab' | center(5) }}][{{ 'é' | center(4) }}][{{ 'x' | center(width=3) }}]",
        NULL, "[   ab  ][ abc  ][ab][  ab ][ é  ][ x ]");
    expect(
        "{% for i in range(5) %}{{ loop.cycle('a', 'b', 'c') }}{% endfor %}|{% for i in [1, 2] %}{% for j in [1, 2, 3] %}{{ loop.cycle('x', 'y') }}{% endfor %}{% endfor %}",
        NULL, "abcab|xyxxyx");
    expect(
        "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c, d = [3, 'x'] %}{{ c }}{{ d }}{% set e, f = 'yz' %}{{ e }}{{ f }}{% set t = 1, 2 %}{{ t | length }}",
        NULL, "123xyz2");
    expect(
        "{% for a, b, c in [[1, 2, 3], 'xyz'] %}{{ a }}{{ b }}{{ c }};{% endfor %}{% for k, v in {'p': 1}.items() %}{{ k }}{{ v }}{% endfor %}{% for x in 1, 2 %}{{ x }}{% endfor %}",
        NULL, "123;xyz;p112");
    expect("{{ [0] * 3 }}{{ 2 * [1, 'a'] }}{{ 'ab' * 2 }}{{ 3 * 'x' }}{{ [1] * 0 }}{{ [1] * -1 }}{{ 'a' * true }}",
           NULL, "[0, 0, 0][1, 'a', 1, 'a']ababxxx[][]a");
    expect(
        "{{ '%s-%s' % ('a', 1) }}|{{ '%d' % 3.7 }}|{{ '%05.2f' % 3.14159 }}|{{ '%s' % 'x' }}|{{ '%-4s|%4s' % ('a', 'b') }}|{{ '%x %o %e' % (255, 8, 12345.678) }}|{{ '100%%' % () }}|{{ '%(a)s=%(b)d' % {'a': 'k', 'b': 2} }}|{{ '%r' % 'q' }}|{{ '%s' % none }}|{{ '%s' % true }}|{{ '%d' % true }}|{{ '%g' % 0.0001 }}|{{ '%c' % 65 }}",
        NULL, "a-1|3|03.14|x|a   |   b|ff 10 1.234568e+04|100%|k=2|'q'|None|True|1|0.0001|A");
    expect(
        "{{ '%s' % [1, 2] }}|{{ '%+d|% d|%05d|%-5d|%.3d' % (5, 5, -42, 7, 3) }}|{{ '%#x|%#o|%X|%x' % (255, 8, 255, -255) }}|{{ '%.2s|%5.1s|%*d' % ('héllo', 'xyz', 4, 9) }}|{{ '%-8.3f|%+.1e|%08.3f' % (2.5, 1234.5, -3.14159) }}|{{ '%c%c' % ('é', 233) }}",
        NULL, "[1, 2]|+5| 5|-0042|7    |003|0xff|0o10|FF|-ff|hé|    x|   9|2.500   |+1.2e+03|-003.142|éé");
    expect("{{ '%.30f|%010.3f|% 8.2e|%-+9.1f|%.5d|%#.3x' % (0.1, -3.14159, 12.5, 2.25, -42, 5) }}", NULL,
           "0.100000000000000005551115123126|-00003.142| 1.25e+01|+2.2     |-00042|0x005");
    expect(
        "{{ '{} and {}'.format('a', 1) }}|{{ '{0}{1}{0}'.format('x', 'y') }}|{{ '{name}!'.format(name='n') }}|{{ '{{}}{}'.format(2) }}|{{ '{:>4}|{:<3}|{:^5}|{:.2f}|{:03d}'.format('a', 'b', 'c', 3.14159, 7) }}",
        NULL, "a and 1|xyx|n!|{}2|   a|b  |  c  |3.14|007");
    expect(
        "{{ '{:,}|{:_}|{:+d}|{: d}|{:x}|{:#x}|{:#b}|{:o}|{:X}|{:_x}|{:c}'.format(1234567, 1234567, 5, 5, 255, 255, 5, 8, 255, 65535, 233) }}",
        NULL, "1,234,567|1_234_567|+5| 5|ff|0xff|0b101|10|FF|ffff|é");
    expect(
        "{{ '{}|{:.3}|{:.3}|{:.3}|{:.1%}|{:e}|{:.2e}|{:g}|{:10.3f}|{:<10.3f}|{:*^9}|{:=+8.2f}|{:,.2f}'.format(2.5, 1.0, 1234.5, 0.000012345, 0.256, 12345.678, -0.5, 1e20, 3.14159, 3.14159, 'é', 3.5, 1234567.891) }}",
        NULL,
        "2.5|1.0|1.23e+03|1.23e-05|25.6%|1.234568e+04|-5.00e-01|1e+20|     3.142|3.142     |****é****|+   3.50|1,234,567.89");
    expect("{{ '{}|{!r}|{!s}|{}|{}|{:d}|{:>5}|{}'.format(none, 'q', 'q', true, [1, 'a'], true, false, 1.5) }}", NULL,
           "None|'q'|q|True|[1, 'a']|1|    0|1.5");
    expect(
        "{{ '{0[a]}|{0.a}|{1[1]}'.format({'a': 'k'}, [7, 8]) }}|{{ '{:.2}|{:5.1}|{:.0f}|{:.0f}|{:#.0f}|{:.3}'.format('héllo', 'xyz', 2.5, 3.5, 2.0, 100.0) }}",
        NULL, "k|k|8|hé|x    |2|4|2.|1e+02");
    expect(
        "{{ '{:05}|{:<05}|{:0>5}|{:-^7}|{:+}|{:+}|{:.2g}|{:10}|{:}|{:x<4}|{:é>3}'.format(-42, 7, 'ab', -1, 0.0, -0.0, 123456.0, 1e-7, 12, 1, 2) }}",
        NULL, "-0042|70000|000ab|---1---|+0.0|-0.0|1.2e+05|     1e-07|12|1xxx|éé2");
    expect_fail("{{ '{} {}'.format('a') }}", NULL, KVT_EFORMAT, "not enough positional arguments");
    expect_fail("{{ '{0} {}'.format('a', 'b') }}", NULL, KVT_EFORMAT, "cannot mix");
    expect_fail("{{ '}'.format() }}", NULL, KVT_EFORMAT, "a single '}'");
    expect_fail("{{ '{x}'.format(y=1) }}", NULL, KVT_EFORMAT, "no argument named 'x'");
    expect_fail("{{ '{:d}'.format('s') }}", NULL, KVT_EFORMAT, "unknown format code 'd' for a string");
    expect_fail("{{ '{:>5}'.format(none) }}", NULL, KVT_EFORMAT, "a none takes no format spec");
    expect_fail("{{ '{:.2d}'.format(3) }}", NULL, KVT_EFORMAT, "precision is not allowed");
    expect_fail("{{ '{:+s}'.format('a') }}", NULL, KVT_EFORMAT, "not allowed for a string");
    expect_fail("{{ '{:1000000000000}'.format(1) }}", NULL, KVT_ELIMIT, "past the output limit");
    expect_fail("{{ '{0[q]}'.format({}) }}", NULL, KVT_EFORMAT, "no item 'q'");
    expect_fail("{% set a, b = [1, 2, 3] %}", NULL, KVT_EFORMAT, "too many values to unpack");
    expect_fail("{% set a, b = [1] %}", NULL, KVT_EFORMAT, "not enough values to unpack");
    expect_fail("{% set a, b = 5 %}", NULL, KVT_EFORMAT, "cannot unpack a int");
    expect_fail("{{ '%s %s' % ('a',) }}", NULL, KVT_EFORMAT, "not enough arguments for format string");
    expect_fail("{{ '%d' % 'x' }}", NULL, KVT_EFORMAT, "%d format: a number is required, not string");
    expect_fail("{{ '%s' % (1, 2) }}", NULL, KVT_EFORMAT, "not all arguments converted");
    expect_fail("{{ '%q' % 1 }}", NULL, KVT_EFORMAT, "unsupported format character 'q'");
    expect_fail("{{ '%\\0' % 1 }}", NULL, KVT_EFORMAT, "unsupported format character");
    expect_fail("{{ '%*d' % (-4611686018427387904 * 2, 1) }}", NULL, KVT_ELIMIT, "past the output limit");
    expect_fail("{{ '%(k)s' % {'a': 1} }}", NULL, KVT_EFORMAT, "no key 'k'");
    expect_fail("{{ '%x' % 1.5 }}", NULL, KVT_EFORMAT, "an integer is required");
    expect_fail("{{ '%' % 1 }}", NULL, KVT_EFORMAT, "incomplete format");
    expect_fail("{{ [1, 'a'] | sort }}", NULL, KVT_EFORMAT, "cannot order");
    expect_fail("{{ 'x' | round }}", NULL, KVT_EFORMAT, "round needs a number");
    expect_fail("{{ 1.5 | round(method='up') }}", NULL, KVT_EFORMAT, "method must be");
    expect_fail("{{ {'a': 1} | dictsort(by='k') }}", NULL, KVT_EFORMAT, "by must be 'key' or 'value'");
    expect_fail("{% for i in [1] %}{{ loop.cycle() }}{% endfor %}", NULL, KVT_EFORMAT, "at least one value");
    expect_fail("{{ {'a': 1}.cycle(1) }}", NULL, KVT_EFORMAT, "no method 'cycle'");
    expect_fail("x\n{% raw %}never ended", NULL, KVT_EFORMAT,
                "line 2, column 21: the template ends before {% endraw %}");
    expect_fail("{% raw x %}{% endraw %}", NULL, KVT_EFORMAT, "expected '%}' after 'raw'");
    expect_fail("{% set a, = 1 %}{% for in x %}{% endfor %}", NULL, KVT_EFORMAT, "line 1");
    /* a raw block keeps the line count: an error after it names its line */
    expect_fail("{% raw %}\n\n{% endraw %}{{ 1 + }}", NULL, KVT_EFORMAT, "line 3, column 20: expected a value");
    kvt_jinja_limits lim = kvt_jinja_default_limits();
    lim.max_memory = 1 << 20;
    expect_fail("{{ [0] * 100000000 }}", &lim, KVT_ELIMIT, "repeated list");
    expect_fail("{{ 'x' | center(1000000000000) }}", NULL, KVT_ELIMIT, "center");
    expect_fail("{{ '%1000000000000s' % 'x' }}", NULL, KVT_ELIMIT, "width");
    /* unique compares each item with those kept: its work counts against the step limit */
    lim = kvt_jinja_default_limits();
    lim.max_steps = 1000000;
    expect_fail("{{ range(100000) | unique | length }}", &lim, KVT_ELIMIT, "steps");
    expect("{{ range(1000) | unique | length }}{{ range(1000) | reverse | sort | first }}", NULL, "10000");
}

/* tojson's options as Hugging Face defines them, hexadecimal, octal and binary literals with
 * "_" between digits, and tuples as Python prints and compares them; each against jinja2. */
static void test_json_numbers_tuples(void) {
    /* sort_keys, ensure_ascii (surrogate pairs past U+FFFF, DEL escaped), by position too; no
     * HTML escaping; a string indent */
    expect("{{ {'b': 'é😀', 'a': [1, '\\x01'], 'c': {'z': 1, 'y': 2}} | tojson(sort_keys=true) }}", NULL,
           "{\"a\": [1, \"\\u0001\"], \"b\": \"é😀\", \"c\": {\"y\": 2, \"z\": 1}}");
    expect("{{ {'b': 'é😀', 'k': '\\x7f', 'n': 'a\\nb'} | tojson(ensure_ascii=true) }}", NULL,
           "{\"b\": \"\\u00e9\\ud83d\\ude00\", \"k\": \"\\u007f\", \"n\": \"a\\nb\"}");
    expect(
        "{{ {'b': 1, 'a': 2} | tojson(true, 2, none, true) }}|{{ {'a': [1]} | tojson(indent='\\t') }}|{{ {'a': [1]} | tojson(indent=0) }}",
        NULL, "{\n  \"a\": 2,\n  \"b\": 1\n}|{\n\t\"a\": [\n\t\t1\n\t]\n}|{\n\"a\": [\n1\n]\n}");
    expect(
        "{{ '<a href=\"x\">&\\'</a>' | tojson }}|{{ (1, 'a') | tojson }}|{{ {'é': 1} | tojson(false, none, (',', ':'), true) }}",
        NULL, "\"<a href=\\\"x\\\">&'</a>\"|[1, \"a\"]|{\"é\":1}");
    expect_fail("{{ {2: 1, 'a': 2} | tojson(sort_keys=true) }}", NULL, KVT_EFORMAT, "cannot order");
    expect(
        "{{ 0x1F }}|{{ 0o17 }}|{{ 0b101 }}|{{ 1_000 }}|{{ 0X1f }}|{{ 0B1_0 }}|{{ 1_000.5 }}|{{ 1e3 }}|{{ 1E-2 }}|{{ 2.5e1_0 }}|{{ 0_0 }}|{{ 0x_ff }}|{{ 0x1F + 1 }}|{{ -0x10 }}|{{ 0O7_7 }}|{{ 0x7FFFFFFFFFFFFFFF }}",
        NULL, "31|15|5|1000|31|2|1000.5|1000.0|0.01|25000000000.0|0|255|32|-16|63|9223372036854775807");
    expect_fail("{{ 012 }}", NULL, KVT_EFORMAT, "line 1, column 4: an integer literal cannot start with 0");
    expect_fail("{{ 0x }}", NULL, KVT_EFORMAT, "'0x' needs hexadecimal digits");
    expect_fail("{{ 1__0 }}", NULL, KVT_EFORMAT, "expected the end of the tag");
    expect_fail("{{ 0b2 }}", NULL, KVT_EFORMAT, "'0b' needs binary digits");
    /* Python's integers grow; a literal past 64 bits is an error here */
    expect_fail("{{ 0x8000000000000000 }}", NULL, KVT_EFORMAT, "too large");
    expect(
        "{{ (1, 2) }}|{{ (1,) }}|{{ () }}|{{ (1, 2) == [1, 2] }}|{{ (1, 2) == (1, 2) }}|{{ (1, 2) in [(1, 2)] }}|{{ [1, 2] in [(1, 2)] }}|{{ 2 in (1, 2) }}|{{ (1, 2) + (3,) }}|{{ (1, 2, 3)[1:] }}|{{ (1, 2) | list }}",
        NULL, "(1, 2)|(1,)|()|False|True|True|False|True|(1, 2, 3)|(2, 3)|[1, 2]");
    expect(
        "{{ {'a': 1}.items() | list }}|{{ (1, 'a') | string }}|{{ ('a', (1,)) }}|{{ '{}'.format((1, 2)) }}|{{ (1,) * 2 }}|{% set t = 1, 2 %}{{ t }}|{{ [(1, 'x')] }}|{{ (1, 2) != [1, 2] }}|{{ ((1, 2),) | length }}",
        NULL, "[('a', 1)]|(1, 'a')|('a', (1,))|(1, 2)|(1, 1)|(1, 2)|[(1, 'x')]|True|1");
    expect_fail("{{ (1, 2) + [3] }}", NULL, KVT_EFORMAT, "cannot add tuple and list");
    expect("{{ (1, 2) < (1, 3) }}{{ [1, 'a'] < [1, 'b'] }}{{ (2,) > (1, 5) }}{{ [1] <= [1, 0] }}", NULL,
           "TrueTrueTrueTrue");
    expect_fail("{{ (1, 2) < [1, 3] }}", NULL, KVT_EFORMAT, "cannot order tuple and list");
    /* an undefined value inside a list or tuple prints as Jinja's repr of one */
    expect("{{ [x, (y, 1)] }}", NULL, "[Undefined, (Undefined, 1)]");
    /* Jinja reads "\r\n" and "\r" as "\n" and drops one newline at a template's end */
    expect("a\r\nb\rc{{ 1 }}\r\n", NULL, "a\nb\nc1");
    expect("{{ 1 }}\n\n", NULL, "1\n");
    expect("{% raw %}x\r\n{% endraw %}\n", NULL, "x\n");
}

/* {% filter %} and {% call %} blocks, a macro's varargs and kwargs, recursive loops, fields
 * nested in a str.format spec, and case changes past ASCII; each against jinja2. */
static void test_blocks_case(void) {
    expect(
        "{% filter upper %}a{{ 'b' }}c{% endfilter %}|{% filter replace('a', 'x') | upper %}banana{% endfilter %}|{% filter trim %}  x  {% endfilter %}",
        NULL, "ABC|BXNXNX|x");
    expect(
        "{% filter indent(2) %}\na\nb\n{% endfilter %}\n|{% for i in [1, 2] %}{% filter upper %}a{{ i }}{% endfilter %}{% endfor %}",
        NULL, "a\n  b\n|A1A2");
    /* a break or continue inside a filter block leaves before the block writes, as in Jinja */
    expect("{% for i in range(3) %}{% filter replace('1', 'one') %}{{ i }}{% if i == 1 %}{% break %}{% endif %}"
           "{% endfilter %}{% endfor %}|{% for i in range(3) %}{% filter upper %}a{{ i }}{% if i == 1 %}{% continue %}"
           "{% endif %}{% endfilter %}{% endfor %}",
           NULL, "0|A0A2");
    expect(
        "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}{% call wrap('i') "
        "%}x{% endcall %}{% endcall %}|{% set ns = namespace(c=0) %}{% macro twice() %}{{ caller() }}{{ caller() }}"
        "{% endmacro %}{% call twice() %}{% set ns.c = ns.c + 1 %}{{ ns.c }}{% endcall %}",
        NULL, "<b><i>x</i></b>|12");
    expect(
        "{% macro m(x) %}<{{ caller() }}|{{ x }}>{% endmacro %}{% call m(1) %}body{% endcall %}|{% set y = 'Y' %}{% call m(2) %}{{ y }}{% endcall %}",
        NULL, "<body|1>|<Y|2>");
    expect(
        "{% macro lst(items) %}{% for i in items %}{{ caller(i) }};{% endfor %}{% endmacro %}{% call(it) lst([1, 2]) %}[{{ it * 10 }}]{% endcall %}|{% macro d(k) %}{{ caller(k, b='B') }}{% endmacro %}{% call(a, b='z') d('A') %}{{ a }}{{ b }}{% endcall %}",
        NULL, "[10];[20];|AB");
    expect(
        "{% macro v(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ v(1, 2, 3, k=4) }}|{{ v(1) }}|{% macro w(a, b=2) %}{{ a }}{{ b }}{{ varargs | length }}{% endmacro %}{{ w(1) }}{{ w(1, 5, 6) }}|{% macro kw() %}{% for k, v in kwargs | dictsort %}{{ k }}={{ v }}{% endfor %}{% endmacro %}{{ kw(z=1, a=2) }}",
        NULL, "1(2, 3){'k': 4}|1(){}|120151|a=2z=1");
    expect_fail("{% macro m(a) %}{% endmacro %}{{ m(1, b=2) }}", NULL, KVT_EFORMAT,
                "macro 'm' takes no keyword argument 'b'");
    expect_fail("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", NULL, KVT_EFORMAT, "macro 'm' takes 1 arguments, not 2");
    expect_fail("{% call undefined_thing() %}x{% endcall %}", NULL, KVT_EFORMAT, "'call' needs a macro, not undefined");
    expect_fail("{% call x %}y{% endcall %}", NULL, KVT_EFORMAT, "'call' needs a macro call");
    expect(
        "{% for x in [{'n': 'a', 'c': [{'n': 'b', 'c': []}, {'n': 'c', 'c': [{'n': 'd', 'c': []}]}]}, {'n': 'e', 'c': []}] recursive %}{{ loop.depth }}{{ x.n }}{{ loop.index }}{% if x.c %}({{ loop(x.c) }}){% endif %}{% endfor %}",
        NULL, "1a1(2b12c2(3d1))1e2");
    expect(
        "{% for x in [1, 2] %}{{ loop.depth }}{{ loop.depth0 }}{% endfor %}|{% for x in [[1, [2, [3]]], 4] recursive %}{% if x is iterable %}[{{ loop(x) }}]{% else %}{{ x }}@{{ loop.depth0 }} {% endif %}{% endfor %}",
        NULL, "1010|[1@1 [2@2 [3@3 ]]]4@0 ");
    expect_fail("{% for x in [1] %}{{ loop([2]) }}{% endfor %}", NULL, KVT_EFORMAT, "a dict cannot be called");
    expect(
        "{{ '{:>{w}}|'.format('x', w=5) }}{{ '{:{}}|'.format('a', 4) }}{{ '{0:>{1}}|'.format('a', 3) }}{{ '{:{fill}^{w}.{p}f}|'.format(3.14159, fill='*', w=10, p=2) }}{{ '{:{}} {}'.format('a', 3, 'b') }}",
        NULL, "    x|a   |  a|***3.14***|a   b");
    expect_fail("{{ '{:{:{}}}'.format(1, 2, 3) }}", NULL, KVT_EFORMAT, "nest more than one level");
    expect_fail("{{ '{0:{}}'.format(1, 2) }}", NULL, KVT_EFORMAT, "cannot mix");
    /* Python's full mappings (ß, İ, ŉ, ΐ), final sigma, digraph title case, str.title's and
     * the title filter's own word rules; islower and isupper by each letter's case, so a cased
     * letter without an upper-case form (ĸ, ʰ) is lower case */
    expect("{{ 'ǅemal' | capitalize }}|{{ 'xǅ'.title() }}|{{ 'ǅ' | lower }}|{{ 'ʰ' is lower }}{{ 'ʰ' is upper }}"
           "{{ 'ǅ' is upper }}{{ 'ĸ' is lower }}{{ 'ÀĸB' is upper }}",
           NULL, "ǅemal|Xǆ|ǆ|TrueFalseFalseTrueFalse");
    expect(
        "{{ 'ÉCOLE ÀÖ' | lower }}|{{ 'straße' | upper }}|{{ 'ΟΔΥΣΣΕΥΣ' | lower }}|{{ 'привет мир' | upper }}|{{ 'Ǆemal' | lower }}|{{ 'ǆemal' | title }}|{{ 'İstanbul' | lower }}|{{ 'ŉ'.upper() }}|{{ 'ΐ' | upper }}|{{ 'Ⱥ' | lower }}|{{ 'ÿ' | upper }}|{{ 'µ' | upper }}",
        NULL, "école àö|STRASSE|οδυσσευς|ПРИВЕТ МИР|ǆemal|Ǆemal|i̇stanbul|ʼN|Ϊ́|ⱥ|Ÿ|Μ");
    expect(
        "{{ 'hello wORLD-foo (bar) o\\'neil x1y' | title }}|{{ 'hello wORLD o\\'neil x1y ǆa'.title() }}|{{ 'éCOLE'.capitalize() }}|{{ 'ßa' | capitalize }}|{{ 'ßa'.title() }}|{{ 'tiếng việt' | upper }}|{{ 'ΑΣ-ΟΣ ΣΑΣ' | title }}|{{ 'ΣΑΣ Σ' | lower }}|{{ 'Σ.' | lower }}|{{ 'AΣ\\'' | lower }}|{{ 'AΣ\\'B' | lower }}",
        NULL,
        "Hello World-Foo (Bar) O'neil X1y|Hello World O'Neil X1Y ǅa|École|Ssa|Ssa|TIẾNG VIỆT|Ασ-Οσ Σας|σας σ|σ.|aς'|aσ'b");
    expect(
        "{{ 'é' is lower }}{{ 'É' is upper }}{{ '1' is lower }}{{ ['b', 'É', 'a', 'é', 'B'] | sort }}{{ 'ÀB' | lower | length }}{{ 'ǅ'.lower() }}{{ 'ǅ'.upper() }}{{ 'ǆ'.capitalize() }}{{ 'Ωmega' | upper }}{{ 'ЁЖ' | lower }}{{ 'ɐ' | upper }}",
        NULL, "TrueTrueFalse['a', 'b', 'B', 'É', 'é']2ǆǄǅΩMEGAёжⱯ");
}

/* A filter block whose filters give no string fails as in Jinja; a block set takes filters; names
 * hold letters past ASCII as Python's identifiers do; each against jinja2. Errors name the line
 * and the column (in characters) where the template is wrong. */
static void test_filters_names_where(void) {
    expect("{% filter length | string %}abc{% endfilter %}|{% filter tojson %}a\"b{% endfilter %}|"
           "{% filter default('x') %}{% endfilter %}",
           NULL, "3|\"a\\\"b\"|");
    expect_fail("{% filter length %}abc{% endfilter %}", NULL, KVT_EFORMAT,
                "line 1, column 11: a filter block's filters must give a string: expected str instance, int found");
    expect_fail("x{% filter list %}ab{% endfilter %}", NULL, KVT_EFORMAT, "expected str instance, list found");
    expect_fail("{% filter first %}{% endfilter %}", NULL, KVT_EFORMAT, "expected str instance, Undefined found");
    expect_fail("{% filter upper | length %}ab{% endfilter %}", NULL, KVT_EFORMAT, "expected str instance, int found");
    expect("{% set x | upper %}abc{% endset %}{{ x }}|{% set x | length %}abc{% endset %}{{ x + 1 }}|"
           "{% set x | replace('a', 'b') | upper %}abc{% endset %}{{ x }}|{% set x|trim %}  q  {% endset %}[{{ x }}]",
           NULL, "ABC|4|BBC|[q]");
    expect("{% set ns = namespace() %}{% set ns.y | upper %}abc{% endset %}{{ ns.y }}|{% set a, b | upper %}ab"
           "{% endset %}{{ b }}{{ a }}|{% set ns.z %}z{% endset %}{{ ns.z }}|{% set c, d %}cd{% endset %}{{ d }}",
           NULL, "ABC|BA|z|d");
    /* a continue inside the block leaves before anything is set */
    expect("{% set x = 'x' %}{% for i in [1, 2] %}{% set x | upper %}a{{ i }}{% if i == 1 %}{% continue %}{% endif %}"
           "{% endset %}{{ x }}{% endfor %}",
           NULL, "A2");
    expect_fail("{% set x | %}ab{% endset %}", NULL, KVT_EFORMAT, "line 1, column 12: expected a filter name");
    expect_fail("{% set x | upper is string %}ab{% endset %}", NULL, KVT_EFORMAT, "filters, not tests");
    expect_fail("{% set x | nofilter %}ab{% endset %}", NULL, KVT_EFORMAT, "no filter named 'nofilter'");
    expect("{% set café = 1 %}{{ café }}|{% set 名前 = 'n' %}{{ 名前 }}|{% set ǅx = 2 %}{{ ǅx }}|{% set x· = 3 %}"
           "{{ x· }}|{{ ß }}|{% macro grüße(wer) %}Hallo {{ wer }}{% endmacro %}{{ grüße('Welt') }}|"
           "{% set Ωμέγα = {'κλειδί': 'τιμή'} %}{{ Ωμέγα.κλειδί }}|{% set ⅰ = 1 %}{{ ⅰ }}",
           NULL, "1|n|2|3||Hallo Welt|τιμή|1");
    expect("{{ ünïcode | default('d') }}", "{\"ünïcode\":\"v\"}", "v");
    expect_fail("{{ ·a }}", NULL, KVT_EFORMAT, "line 1, column 4: invalid character in the name '·a'");
    expect_fail("{% set x² = 1 %}", NULL, KVT_EFORMAT, "invalid character in the name 'x²'");
    expect_fail("{{ 1 → 2 }}", NULL, KVT_EFORMAT, "line 1, column 6: unexpected character '→' in a tag");
    /* the column of a parse error and of a runtime error, in characters, on later lines too */
    expect_fail("é{{ 1 + }}", NULL, KVT_EFORMAT, "line 1, column 9: expected a value");
    expect_fail("a\n  b {{ x | nofilter }}", NULL, KVT_EFORMAT, "line 2, column 12: no filter named 'nofilter'");
    expect_fail("{% if true %}\n\t{{ raise_exception('no') }}{% endif %}", NULL, KVT_EFORMAT,
                "line 2, column 5: the template raised an error: no");
    expect_fail("{% for m in [1] %}\n{{ m.a.b }}{% endfor %}", NULL, KVT_EFORMAT, "line 2, column");
    expect_fail("{% if x %}\n  {% endfor %}", NULL, KVT_EFORMAT, "line 2, column 6: 'endfor' is not a statement");
    expect_fail("{{ 'x' ~ 1 // 0 }}", NULL, KVT_EFORMAT, "line 1, column 12: ");
    expect_fail("ab\n{# never", NULL, KVT_EFORMAT, "line 2, column 1: a comment is not closed");
    /* case tables past Latin, Greek, Cyrillic and Armenian: polytonic Greek, Georgian (Mtavruli),
     * Cherokee, Deseret, fullwidth, circled and Roman numeral letters, Glagolitic, Coptic, Adlam */
    expect(
        "{{ 'ἀθήνη ᾳ ὦ' | upper }}|{{ 'ᾳβ'.title() }}|{{ 'ΑΘΉΝΗ' | lower }}|{{ 'ქართული' | upper }}|"
        "{{ 'ᲥᲐᲠᲗᲣᲚᲘ' | lower }}|{{ 'ქართ' | title }}|{{ 'ꭰꭱ' | upper }}|{{ 'ᏣᎳᎩ' | lower }}|{{ '𐐨𐐯' | upper }}|"
        "{{ 'ａｂｃ' | upper }}|{{ 'ⓐⓑ' | upper }}|{{ 'ⅰⅱ' | upper }}|{{ 'ⰰ' | upper }}|{{ 'ⲁ' | upper }}|"
        "{{ '𞤢' | upper }}|{{ 'ꙁ' | upper }}|{{ 'ⓐ' is lower }}{{ 'Ⅰ' is upper }}{{ 'ა' is lower }}",
        NULL,
        "ἈΘΉΝΗ ΑΙ Ὦ|ᾼβ|αθήνη|ᲥᲐᲠᲗᲣᲚᲘ|ქართული|Ქართ|ᎠᎡ|ꮳꮃꭹ|𐐀𐐇|ＡＢＣ|ⒶⒷ|ⅠⅡ|Ⰰ|Ⲁ|𞤀|Ꙁ|TrueTrueTrue");
}

/* What the llama.cpp templates needed: select, reject and map give generators (always true, no
 * length, item or JSON) and take none as nothing; the safe filter gives a Markup string, to which
 * "+" adds other strings HTML-escaped; each against jinja2. */
static void test_generators_markup(void) {
    expect("{{ none | selectattr('x') | list }}|{{ none | map(attribute='x') | list }}|{% if [] | select %}T{% endif %}|"
           "{{ ([1] | map('string'))[0] }}|{{ [1, 2] | select | join(',') }}|{{ [1, 2] | map('string') is sequence }}"
           "{{ [1, 2] | map('string') is iterable }}|{{ [3, 1] | select | sort | first }}|{{ 0 | select | list }}",
           NULL, "[]|[]|T||1,2|FalseTrue|1|[]");
    expect_fail("{{ [1] | select | length }}", NULL, KVT_EFORMAT, "object of type 'generator' has no len()");
    expect_fail("{{ [1] | map('string') | tojson }}", NULL, KVT_EFORMAT,
                "Object of type generator is not JSON serializable");
    expect_fail("{{ [1] | select | last }}", NULL, KVT_EFORMAT, "'generator' object is not reversible");
    expect_fail("{{ [1] | select + [2] }}", NULL, KVT_EFORMAT, "cannot add generator and list");
    expect_fail("{{ 3 | select | list }}", NULL, KVT_EFORMAT, "select needs a list, not integer");
    expect("{{ 'a'|safe + '<b>' }}|{{ '<b>\"' + 'a'|safe }}|{{ 'a'|safe ~ '<b>' }}|{{ '<'|safe + '&'|safe }}|"
           "{{ 5|safe + \"'\" }}|{{ ('a'|safe + '<') ~ '<' }}",
           NULL, "a&lt;b&gt;|&lt;b&gt;&#34;a|a<b>|<&|5&#39;|a&lt;<");
    expect_fail("{{ 'a'|safe + 1 }}", NULL, KVT_EFORMAT, "cannot add string and integer");
    /* the globals are defined, as Hugging Face's are: Llama 3.2's template dates its prompt so */
    expect(
        "{{ strftime_now is defined }}{{ raise_exception is undefined }}{{ range is not defined }}{{ nothing is defined }}",
        NULL, "TrueFalseFalseFalse");
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
    expect_fail("{% if x %}never closed", NULL, KVT_EFORMAT, "line 1, column 23: the template ends before {% endif %}");
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
    test_features();
    test_json_numbers_tuples();
    test_blocks_case();
    test_filters_names_where();
    test_generators_markup();
    test_limits();
    return kvt_test_done("test_jinja");
}
