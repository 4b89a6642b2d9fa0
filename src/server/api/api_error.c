// SPDX-License-Identifier: MIT
/* The errors of the OpenAI-compatible surface (api_error.h): filling one, and
 * its JSON body. */
#include "api_error.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_utf8.h"
#include "common.h"

int kvt_api_errorf(kvt_api_error *e, int status, const char *type, const char *param, const char *code, const char *fmt,
                   ...) {
    e->status = status;
    e->type = type;
    e->param = param;
    e->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return KVT_EARG;
}

int kvt_api_error_item(kvt_api_error *e, const char *array, size_t i, const char *field, const char *code,
                       const char *fmt, ...) {
    e->status = 400;
    e->type = "invalid_request_error";
    e->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    snprintf(e->param_text, sizeof e->param_text, "%s[%zu]%s", array, i, field);
    e->param = e->param_text;
    return KVT_EARG;
}

char *kvt_api_error_json(const kvt_api_error *e) {
    cJSON *o = cJSON_CreateObject();
    cJSON *er = cJSON_AddObjectToObject(o, "error");
    char *msg = kvt_utf8_sanitize(e->message, strlen(e->message), NULL);
    cJSON_AddStringToObject(er, "message", msg);
    free(msg);
    cJSON_AddStringToObject(er, "type", e->type ? e->type : "invalid_request_error");
    if (e->param) cJSON_AddStringToObject(er, "param", e->param);
    else cJSON_AddNullToObject(er, "param");
    if (e->code) cJSON_AddStringToObject(er, "code", e->code);
    else cJSON_AddNullToObject(er, "code");
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s ? s : kvt_xstrdup("{}"); /* cJSON fails only when out of memory */
}
