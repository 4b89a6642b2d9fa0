// SPDX-License-Identifier: MIT
/* The Jinja reference set of tests/runtime/jinja, shared by test_jinja.c and
 * test_jinja_marks.c: the expected renderings and the cases, a case's
 * variables (with the tokens the renderings assume) and a template of the
 * set, parsed. */
#ifndef KVT_TEST_JINJA_REF_H
#define KVT_TEST_JINJA_REF_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "common.h"
#include "jinja.h"
#include "testutil.h"

/* The set's expected renderings (expected.json) and cases (cases.json) in dir, parsed into *exp
 * and *cases (the caller's to delete); 0 after a failed check that they could be read. */
static inline int jinja_ref_load(const char *dir, cJSON **exp, cJSON **cases) {
    char *exp_text = kvt_test_read_file(kvt_test_path(dir, "expected.json"), NULL);
    char *cases_text = kvt_test_read_file(kvt_test_path(dir, "cases.json"), NULL);
    CHECK(exp_text && cases_text);
    *exp = exp_text && cases_text ? cJSON_Parse(exp_text) : NULL;
    *cases = exp_text && cases_text ? cJSON_Parse(cases_text) : NULL;
    int ok = exp_text && cases_text;
    free(exp_text);
    free(cases_text);
    return ok;
}

/* Case `name`'s variables from cases.json (a copy, the caller's to delete), or NULL. */
static inline cJSON *jinja_ref_case_vars(const cJSON *cases, const char *name) {
    const cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        if (!strcmp(cJSON_GetObjectItem(c, "name")->valuestring, name)) {
            cJSON *v = cJSON_Duplicate(cJSON_GetObjectItem(c, "vars"), 1);
            cJSON_AddStringToObject(v, "bos_token", "<s>");
            cJSON_AddStringToObject(v, "eos_token", "</s>");
            return v;
        }
    }
    return NULL;
}

/* want with each "@@strftime_now(FORMAT)@@" of scripts/make_jinja_expected.py replaced by the local time of
 * `when` in FORMAT, as strftime_now writes it (malloc'd). */
static inline char *jinja_ref_dates(const char *want, time_t when) {
    static const char open[] = "@@strftime_now(", close[] = ")@@";
    size_t cap = strlen(want) + 1, n = 0;
    char *out = malloc(cap);
    struct tm tm;
    localtime_r(&when, &tm);
    for (const char *p = want; *p;) {
        const char *s = strstr(p, open), *e = s ? strstr(s, close) : NULL;
        size_t lit = s && e ? (size_t)(s - p) : strlen(p);
        char date[256] = "", fmt[128];
        if (s && e) {
            snprintf(fmt, sizeof fmt, "%.*s", (int)(e - s - (sizeof open - 1)), s + sizeof open - 1);
            strftime(date, sizeof date, fmt, &tm);
        }
        size_t dn = strlen(date);
        if (n + lit + dn + 1 > cap) out = realloc(out, cap = n + lit + dn + 1 + cap);
        memcpy(out + n, p, lit), n += lit;
        memcpy(out + n, date, dn), n += dn;
        p = s && e ? e + sizeof close - 1 : p + lit;
    }
    out[n] = 0;
    return out;
}

/* Template `tn` of the set in dir (tn.jinja), parsed; NULL after a failed check. */
static inline kvt_jinja *jinja_ref_template(const char *dir, const char *tn) {
    char file[256];
    snprintf(file, sizeof file, "%s.jinja", tn);
    size_t len = 0;
    char *src = kvt_test_read_file(kvt_test_path(dir, file), &len);
    kvt_jinja *t = NULL;
    CHECKF(src && kvt_jinja_parse(src, len, &t) == 0, "%s: %s", tn, kvt_errmsg());
    free(src);
    return t;
}

#endif
