// SPDX-License-Identifier: MIT
/* The Jinja reference set of tests/runtime/jinja, shared by test_jinja.c and
 * test_jinja_marks.c: a case's variables (cases.json, with the tokens the
 * renderings assume) and a template of the set, parsed. */
#ifndef KVT_TEST_JINJA_REF_H
#define KVT_TEST_JINJA_REF_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common.h"
#include "jinja.h"
#include "testutil.h"

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
