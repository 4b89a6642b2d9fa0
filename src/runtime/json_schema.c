// SPDX-License-Identifier: MIT
/* JSON Schema (the subset json_grammar.h states) compiled into the node graph
 * json_grammar.c matches against. Every keyword is either understood,
 * accepted as an annotation, or refused with a message that names it and
 * where it sits, so a schema never constrains less than it says. This file
 * holds the keywords of each type; json_schema_link.c the references, allOf
 * and the final pass over the whole graph. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gbnf.h"
#include "json_lazy.h"
#include "json_schema_impl.h"

int fail(compiler *c, const char *fmt, ...) {
    if (c->failed) return -1;
    c->failed = 1;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(c->err, c->cap, "%s at %s", msg, c->path[0] ? c->path : "/");
    return -1;
}

int32_t new_node(compiler *c, jnode_kind kind) {
    kvt_jg_schema *s = c->s;
    if (s->n_nodes == s->cap_nodes) {
        s->cap_nodes = s->cap_nodes ? 2 * s->cap_nodes : 16;
        s->nodes = kvt_xrealloc(s->nodes, (size_t)s->cap_nodes * sizeof *s->nodes);
    }
    jnode *n = &s->nodes[s->n_nodes];
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->max_items = n->max_len = JG_NO_LIMIT;
    n->free_value = n->key_node = -1;
    n->mult = 1;
    n->min_bytes = JG_INF;
    n->nest = 1;
    return s->n_nodes++;
}

jnode *node(compiler *c, int32_t i) { return &c->s->nodes[i]; }

/* Gives node i room for n entries of s/slen/child (and t/tlen when tails). */
void node_alloc(compiler *c, int32_t i, int32_t n, int tails) {
    jnode *nd = node(c, i);
    nd->s = kvt_xcalloc((size_t)(n ? n : 1), sizeof *nd->s);
    nd->slen = kvt_xcalloc((size_t)(n ? n : 1), sizeof *nd->slen);
    nd->child = kvt_xcalloc((size_t)(n ? n : 1), sizeof *nd->child);
    if (tails) {
        nd->t = kvt_xcalloc((size_t)(n ? n : 1), sizeof *nd->t);
        nd->tlen = kvt_xcalloc((size_t)(n ? n : 1), sizeof *nd->tlen);
    }
}

/* A node of literal texts (enum, const, true/false/null). */
static int32_t lits_node(compiler *c, const char *const *texts, int32_t n) {
    int32_t i = new_node(c, JN_LITS);
    node_alloc(c, i, n, 0);
    jnode *nd = node(c, i);
    nd->n = n;
    for (int32_t k = 0; k < n; k++) {
        nd->s[k] = kvt_xstrdup(texts[k]);
        nd->slen[k] = (int32_t)strlen(texts[k]);
        nd->min_bytes = KVT_MIN(nd->min_bytes, nd->slen[k]);
    }
    return i;
}

static int32_t string_node(compiler *c, uint32_t min_len, uint32_t max_len) {
    int32_t i = new_node(c, JN_STRING);
    node(c, i)->min_len = min_len;
    node(c, i)->max_len = max_len;
    node(c, i)->min_bytes = 2 + (int32_t)KVT_MIN(min_len, (uint32_t)JG_INF / 2);
    return i;
}

/* Any JSON value: objects with any keys, arrays of anything, strings,
 * numbers, true, false, null. One node graph per schema, built once. */
static int32_t any_node(compiler *c) {
    if (c->any >= 0) return c->any;
    int32_t u = new_node(c, JN_UNION);
    c->any = u;
    int32_t obj = new_node(c, JN_OBJECT);
    c->any_object = obj;
    node(c, obj)->free_keys = 1;
    node(c, obj)->free_value = u;
    node(c, obj)->key_node = c->s->any_string;
    int32_t arr = new_node(c, JN_ARRAY);
    node_alloc(c, arr, 1, 0);
    node(c, arr)->n = 1;
    node(c, arr)->child[0] = u;
    int32_t num = new_node(c, JN_NUMBER);
    node(c, num)->min_bytes = 1;
    static const char *const tfn[] = {"true", "false", "null"};
    int32_t lit = lits_node(c, tfn, 3);
    node_alloc(c, u, 5, 0);
    jnode *n = node(c, u);
    n->n = 5;
    n->child[0] = obj;
    n->child[1] = arr;
    n->child[2] = c->s->any_string;
    n->child[3] = num;
    n->child[4] = lit;
    return u;
}

/* Appends "/seg" to the path for the duration of one compile. */
int32_t compile_at(compiler *c, const cJSON *sc, int depth, const char *seg) {
    size_t len = strlen(c->path);
    snprintf(c->path + len, sizeof c->path - len, "/%s", seg);
    int32_t r = compile(c, sc, depth);
    c->path[len] = 0;
    return r;
}

static int get_count(compiler *c, const cJSON *sc, const char *name, uint32_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(sc, name);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble) || v->valuedouble > 1e9)
        return fail(c, "'%s' must be a non-negative integer", name);
    *out = (uint32_t)v->valuedouble;
    return 0;
}

/* The key node of an object's free keys: propertyNames (a string schema, or
 * an enum of strings), else any string. */
static int32_t compile_keys(compiler *c, const cJSON *names, int depth) {
    if (!names) return c->s->any_string;
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(names, "enum");
    const cJSON *cst = cJSON_GetObjectItemCaseSensitive(names, "const");
    if (cJSON_IsObject(names) && (en || cst)) {
        /* the names as an alternation of escaped literals */
        size_t cap = 16, len = 0;
        char *pat = kvt_xmalloc(cap);
        int k = 0;
        for (const cJSON *v = cst ? cst : en->child; v; v = cst ? NULL : v->next, k++) {
            if (!cJSON_IsString(v)) return free(pat), fail(c, "'propertyNames' may only list strings");
            size_t need = len + 2 * strlen(v->valuestring) + 4;
            if (need > cap) pat = kvt_xrealloc(pat, cap = 2 * need);
            if (k) pat[len++] = '|';
            for (const char *p = v->valuestring; *p; p++) {
                if (strchr("\\^$.|?*+()[]{}/-", *p)) pat[len++] = '\\';
                pat[len++] = *p;
            }
        }
        pat[len] = 0;
        int32_t i = new_node(c, JN_STRING);
        char msg[200];
        if (kvt_jrx_compile(pat, 0, JG_NO_LIMIT, &node(c, i)->rx, msg, sizeof msg)) {
            free(pat);
            return fail(c, "'propertyNames': %s", msg);
        }
        free(pat);
        node(c, i)->max_len = JG_NO_LIMIT;
        node(c, i)->min_bytes = 2 + node(c, i)->rx->dist[0];
        return i;
    }
    int32_t i = compile_at(c, names, depth + 1, "propertyNames");
    if (i >= 0 && node(c, i)->kind != JN_STRING) return fail(c, "'propertyNames' must describe strings");
    return i;
}

static int32_t compile_object(compiler *c, const cJSON *sc, int depth) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(sc, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(sc, "required");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(sc, "additionalProperties");
    const cJSON *names = cJSON_GetObjectItemCaseSensitive(sc, "propertyNames");
    if (props && !cJSON_IsObject(props)) return fail(c, "'properties' must be an object");
    if (req && !cJSON_IsArray(req)) return fail(c, "'required' must be an array of property names");
    if (addl && !cJSON_IsBool(addl) && !cJSON_IsObject(addl))
        return fail(c, "'additionalProperties' must be a boolean or a schema");
    int32_t n = props ? cJSON_GetArraySize(props) : 0;
    if (n > KVT_JG_MAX_SET) return fail(c, "more than %d properties in one object", KVT_JG_MAX_SET);
    if (n && names) return fail(c, "unsupported 'propertyNames' beside 'properties'");
    if (n && cJSON_IsObject(addl) && cJSON_GetArraySize(addl))
        return fail(c,
                    "unsupported 'additionalProperties' as a schema beside 'properties' (declare every "
                    "property, or use a record without 'properties')");
    int32_t i = new_node(c, JN_OBJECT);
    node_alloc(c, i, n, 0);
    node(c, i)->n = n;
    int32_t k = 0;
    for (const cJSON *p = props ? props->child : NULL; p; p = p->next, k++) {
        cJSON *key = cJSON_CreateString(p->string);
        char *text = cJSON_PrintUnformatted(key);
        cJSON_Delete(key);
        char seg[96];
        snprintf(seg, sizeof seg, "properties/%.80s", p->string);
        int32_t child = compile_at(c, p, depth + 1, seg);
        jnode *nd = node(c, i); /* compile may have moved the array */
        nd->s[k] = text;
        nd->slen[k] = (int32_t)strlen(text);
        nd->child[k] = child;
        if (child < 0) return -1;
    }
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next) {
        int32_t at = -1;
        for (int32_t q = 0; q < n && cJSON_IsString(r); q++)
            if (!strcmp(cJSON_GetArrayItem(props, q)->string, r->valuestring)) at = q;
        if (at < 0)
            return fail(c, "'required' names %s%.64s%s, which is not in 'properties'", cJSON_IsString(r) ? "'" : "",
                        cJSON_IsString(r) ? r->valuestring : "a non-string", cJSON_IsString(r) ? "'" : "");
        node(c, i)->required |= 1ull << at;
    }
    if (!n && !cJSON_IsFalse(addl)) {
        /* no declared properties: any keys (of propertyNames), with values of additionalProperties' schema */
        int32_t v = cJSON_IsObject(addl) ? compile_at(c, addl, depth + 1, "additionalProperties") : -2;
        if (v == -2) v = any_node(c);
        int32_t keys = v < 0 ? -1 : compile_keys(c, names, depth);
        if (v < 0 || keys < 0) return -1;
        jnode *nd = node(c, i);
        nd->free_keys = 1;
        nd->free_value = v;
        nd->key_node = keys;
    }
    return i;
}

static int32_t compile_array(compiler *c, const cJSON *sc, int depth) {
    uint32_t lo = 0, hi = JG_NO_LIMIT;
    if (get_count(c, sc, "minItems", &lo) || get_count(c, sc, "maxItems", &hi)) return -1;
    if (lo > hi) return fail(c, "'minItems' is above 'maxItems'");
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(sc, "items");
    const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(sc, "prefixItems");
    if (prefix && (!cJSON_IsArray(prefix) || cJSON_GetArraySize(prefix) > KVT_JG_MAX_SET))
        return fail(c, "'prefixItems' must be an array of at most %d schemas", KVT_JG_MAX_SET);
    if (cJSON_IsArray(items)) return fail(c, "unsupported 'items' as an array (use 'prefixItems')");
    int32_t np = prefix ? cJSON_GetArraySize(prefix) : 0;
    int32_t i = new_node(c, JN_ARRAY);
    node_alloc(c, i, 1 + np, 0);
    node(c, i)->n = 1 + np;
    int32_t it = -1;
    if (cJSON_IsFalse(items)) hi = KVT_MIN(hi, (uint32_t)np);
    else it = items ? compile_at(c, items, depth + 1, "items") : any_node(c);
    if (!cJSON_IsFalse(items) && it < 0) return -1;
    if (lo > hi) return fail(c, "'minItems' asks for more items than 'prefixItems' allows");
    node(c, i)->child[0] = it;
    int k = 0;
    for (const cJSON *p = prefix ? prefix->child : NULL; p; p = p->next, k++) {
        char seg[32];
        snprintf(seg, sizeof seg, "prefixItems/%d", k);
        int32_t ch = compile_at(c, p, depth + 1, seg);
        if (ch < 0) return -1;
        node(c, i)->child[1 + k] = ch;
    }
    node(c, i)->min_items = lo;
    node(c, i)->max_items = hi;
    return i;
}

/* 1 if value v is of JSON Schema type t (NULL: no type given). */
static int of_type(const cJSON *v, const cJSON *type) {
    if (!type) return 1;
    if (cJSON_IsArray(type)) {
        for (const cJSON *t = type->child; t; t = t->next)
            if (of_type(v, t)) return 1;
        return 0;
    }
    const char *t = cJSON_IsString(type) ? type->valuestring : "";
    if (!strcmp(t, "object")) return cJSON_IsObject(v);
    if (!strcmp(t, "array")) return cJSON_IsArray(v);
    if (!strcmp(t, "string")) return cJSON_IsString(v);
    if (!strcmp(t, "number")) return cJSON_IsNumber(v);
    if (!strcmp(t, "integer")) return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble);
    if (!strcmp(t, "boolean")) return cJSON_IsBool(v);
    if (!strcmp(t, "null")) return cJSON_IsNull(v);
    return 0;
}

/* The literal texts of enum or const: any JSON values, written compactly,
 * keeping only those of the schema's type when it has one. */
static int32_t compile_lits(compiler *c, const cJSON *list, int is_const, const cJSON *type) {
    int32_t n = is_const ? 1 : cJSON_GetArraySize(list);
    if (n < 1 || n > KVT_JG_MAX_SET) return fail(c, "'enum' must hold 1 to %d values", KVT_JG_MAX_SET);
    char **texts = kvt_xcalloc((size_t)n, sizeof *texts);
    int32_t k = 0;
    for (const cJSON *v = is_const ? list : list->child; v; v = is_const ? NULL : v->next)
        if (of_type(v, type)) texts[k++] = cJSON_PrintUnformatted(v);
    int32_t i = k ? lits_node(c, (const char *const *)texts, k)
                  : fail(c, "no value of '%s' is of the schema's 'type'", is_const ? "const" : "enum");
    for (int32_t q = 0; q < k; q++) cJSON_free(texts[q]);
    free(texts);
    return i;
}

typedef struct {
    double v;
    int has, excl;
} bound;

static int32_t digits(int64_t v) {
    int32_t d = 1;
    while (v >= 10) v /= 10, d++;
    return d;
}

/* The magnitudes of one sign (see jmag) from the value bounds lo/hi. */
static void sign_mag(jmag *m, int neg, bound lo, bound hi, int integer, int64_t mult) {
    const double lim = KVT_JG_NUMBER_LIMIT;
    bound a, b; /* bounds of the magnitude */
    memset(m, 0, sizeof *m);
    if (!neg) {
        if (hi.has && (hi.v < 0 || (hi.v == 0 && hi.excl))) return;
        a = lo.has && lo.v >= 0 ? lo : (bound){0, 1, 0};
        b = hi;
    } else {
        if (lo.has && lo.v >= 0) return; /* and no "-0" */
        b = lo.has ? (bound){-lo.v, 1, lo.excl} : (bound){0, 0, 0};
        a = hi.has && hi.v < 0 ? (bound){-hi.v, 1, hi.excl} : (bound){0, 1, 1};
    }
    if (a.v > lim) return;
    int real_b = b.has && b.v <= lim;
    if (integer) {
        m->za = (int64_t)(a.excl ? floor(a.v) + 1 : ceil(a.v));
        m->zb = real_b ? (int64_t)(b.excl ? ceil(b.v) - 1 : floor(b.v)) : (int64_t)lim;
        m->fa = 1, m->fb = 0;
        m->za = (m->za + mult - 1) / mult * mult;
    } else {
        m->za = (int64_t)a.v + a.excl;
        m->zb = real_b ? (int64_t)b.v - b.excl : (int64_t)lim;
        m->fa = (int64_t)a.v;
        m->fb = real_b ? (int64_t)b.v - 1 : (int64_t)lim;
    }
    int32_t best = JG_INF;
    if (m->za <= m->zb) best = digits(m->za);
    if (m->fa <= m->fb) best = KVT_MIN(best, digits(m->fa) + 2); /* "0.1" */
    m->ok = best < JG_INF;
    m->min_bytes = best;
}

static int get_bound(compiler *c, const cJSON *sc, const char *name, const char *excl_name, int integer, bound *out) {
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(sc, name);
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(sc, excl_name);
    memset(out, 0, sizeof *out);
    if (b && !cJSON_IsNumber(b)) return fail(c, "'%s' must be a number", name);
    if (x && !cJSON_IsNumber(x) && !cJSON_IsBool(x)) return fail(c, "'%s' must be a number", excl_name);
    if (b) *out = (bound){b->valuedouble, 1, cJSON_IsTrue(x)}; /* draft 4: exclusiveMinimum: true */
    if (cJSON_IsNumber(x)) {
        int tighter = !out->has || (name[1] == 'i' ? x->valuedouble >= out->v : x->valuedouble <= out->v);
        if (tighter) *out = (bound){x->valuedouble, 1, 1};
    }
    if (out->has && !integer && out->v != floor(out->v) && fabs(out->v) < KVT_JG_NUMBER_LIMIT)
        return fail(c,
                    "unsupported '%s' of %g for a number: a number's bounds must be whole (an integer's may be "
                    "any value)",
                    out->excl ? excl_name : name, out->v);
    return 0;
}

/* Numbers: any bounds for integers, and multipleOf; whole-number bounds for
 * numbers. A bounded number has no exponent. */
static int32_t compile_number(compiler *c, const cJSON *sc, int integer) {
    int32_t i = new_node(c, integer ? JN_INTEGER : JN_NUMBER);
    node(c, i)->min_bytes = 1;
    bound lo, hi;
    if (get_bound(c, sc, "minimum", "exclusiveMinimum", integer, &lo) ||
        get_bound(c, sc, "maximum", "exclusiveMaximum", integer, &hi))
        return -1;
    const cJSON *mo = cJSON_GetObjectItemCaseSensitive(sc, "multipleOf");
    int64_t mult = 1;
    if (mo) {
        if (!integer) return fail(c, "unsupported 'multipleOf' for a number (integers only)");
        if (!cJSON_IsNumber(mo) || mo->valuedouble < 1 || mo->valuedouble != floor(mo->valuedouble) ||
            mo->valuedouble > KVT_JG_NUMBER_LIMIT)
            return fail(c, "unsupported 'multipleOf' of %g (a whole number from 1 is supported)",
                        cJSON_IsNumber(mo) ? mo->valuedouble : 0.0);
        mult = (int64_t)mo->valuedouble;
    }
    if (!lo.has && !hi.has && mult == 1) return i;
    jnode *n = node(c, i);
    n->bounded = 1;
    n->mult = mult;
    sign_mag(&n->mag[0], 0, lo, hi, integer, mult);
    sign_mag(&n->mag[1], 1, lo, hi, integer, mult);
    if (!n->mag[0].ok && !n->mag[1].ok)
        return fail(c, "no %s satisfies the bounds ('minimum'/'maximum'/'exclusive*'/'multipleOf', within +-%.0f)",
                    integer ? "integer" : "number", KVT_JG_NUMBER_LIMIT);
    n->min_bytes = KVT_MIN(n->mag[0].ok ? n->mag[0].min_bytes : JG_INF, n->mag[1].ok ? 1 + n->mag[1].min_bytes : JG_INF);
    return i;
}

static int32_t compile_string(compiler *c, const cJSON *sc) {
    uint32_t lo = 0, hi = JG_NO_LIMIT;
    if (get_count(c, sc, "minLength", &lo) || get_count(c, sc, "maxLength", &hi)) return -1;
    if (lo > hi) return fail(c, "'minLength' is above 'maxLength'");
    if (lo > 1u << 20) return fail(c, "'minLength' is too large");
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(sc, "pattern");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(sc, "format");
    if (!pat && !fmt) return string_node(c, lo, hi);
    if (pat && !cJSON_IsString(pat)) return fail(c, "'pattern' must be a string");
    if (fmt && !cJSON_IsString(fmt)) return fail(c, "'format' must be a string");
    /* A pattern beside a format is what the string follows: format only annotates unless a validator
     * opts in to asserting it, and the clients that write both (zod's uuid, email, iso datetime) give
     * the pattern as their own, stricter spelling of the format, which is what they check on parse. */
    const char *re = pat ? pat->valuestring : format_pattern(fmt->valuestring);
    if (!re)
        return fail(c, "unsupported 'format' \"%.32s\" (supported: date-time, date, time, email, uuid, uri, ipv4)",
                    fmt->valuestring);
    int32_t i = string_node(c, 0, JG_NO_LIMIT);
    char msg[200];
    if (kvt_jrx_compile(re, lo, hi, &node(c, i)->rx, msg, sizeof msg)) return fail(c, "%s", msg);
    node(c, i)->min_bytes = 2 + node(c, i)->rx->dist[0];
    return i;
}

static int32_t compile_type(compiler *c, const cJSON *sc, const char *type, int depth) {
    if (!strcmp(type, "object")) return compile_object(c, sc, depth);
    if (!strcmp(type, "array")) return compile_array(c, sc, depth);
    if (!strcmp(type, "string")) return compile_string(c, sc);
    if (!strcmp(type, "number") || !strcmp(type, "integer")) return compile_number(c, sc, type[0] == 'i');
    if (!strcmp(type, "boolean")) {
        static const char *const tf[] = {"true", "false"};
        return lits_node(c, tf, 2);
    }
    if (!strcmp(type, "null")) {
        static const char *const nl[] = {"null"};
        return lits_node(c, nl, 1);
    }
    return fail(c, "unsupported 'type' \"%.32s\"", type);
}

/* Keywords that only describe and never constrain ($defs and definitions
 * hold schemas for $ref). */
static const char *const ANNOTATIONS[] = {"title",    "description", "$schema",      "$id",         "default",
                                          "examples", "$comment",    "$defs",        "definitions", "deprecated",
                                          "readOnly", "writeOnly",   "discriminator"};
/* Keywords compile() understands, and the type each implies when 'type' is absent. */
static const struct {
    const char *word, *type;
} UNDERSTOOD[] = {
    {"type", NULL},
    {"properties", "object"},
    {"required", "object"},
    {"additionalProperties", "object"},
    {"propertyNames", "object"},
    {"items", "array"},
    {"prefixItems", "array"},
    {"minItems", "array"},
    {"maxItems", "array"},
    {"minLength", "string"},
    {"maxLength", "string"},
    {"pattern", "string"},
    {"format", "string"},
    {"enum", NULL},
    {"const", NULL},
    {"anyOf", NULL},
    {"oneOf", NULL},
    {"allOf", NULL},
    {"$ref", NULL},
    {"minimum", "number"},
    {"maximum", "number"},
    {"exclusiveMinimum", "number"},
    {"exclusiveMaximum", "number"},
    {"multipleOf", "integer"},
};

int is_annotation(const char *k) {
    for (size_t i = 0; i < KVT_ARRAY_LEN(ANNOTATIONS); i++)
        if (!strcmp(k, ANNOTATIONS[i])) return 1;
    return 0;
}

/* The keyword's implied type (NULL: none), or "?" when it is unknown. */
static const char *keyword_type(const char *k) {
    for (size_t i = 0; i < KVT_ARRAY_LEN(UNDERSTOOD); i++)
        if (!strcmp(k, UNDERSTOOD[i].word)) return UNDERSTOOD[i].type;
    return is_annotation(k) ? NULL : "?";
}

/* anyOf/oneOf: a union of the branches, linked and checked once whole. */
static int32_t compile_union(compiler *c, const cJSON *list, const char *word, int depth) {
    if (!cJSON_IsArray(list) || !cJSON_GetArraySize(list)) return fail(c, "'%s' must be a non-empty array", word);
    int32_t n = cJSON_GetArraySize(list);
    if (n > KVT_JG_MAX_SET) return fail(c, "'%s' has more than %d branches", word, KVT_JG_MAX_SET);
    int32_t u = new_node(c, JN_UNION);
    node_alloc(c, u, n, 0);
    node(c, u)->n = n;
    int k = 0;
    for (const cJSON *b = list->child; b; b = b->next, k++) {
        char seg[32];
        snprintf(seg, sizeof seg, "%s/%d", word, k);
        int32_t bi = compile_at(c, b, depth + 1, seg);
        if (bi < 0) return -1;
        node(c, u)->child[k] = bi;
    }
    if (word[0] == 'o') {
        c->oneofs = kvt_xrealloc(c->oneofs, (size_t)(c->n_oneofs + 1) * sizeof *c->oneofs);
        c->oneofs[c->n_oneofs].node = u;
        snprintf(c->oneofs[c->n_oneofs++].path, PATH_MAX_LEN, "%s", c->path[0] ? c->path : "/");
    }
    return u;
}

int32_t compile(compiler *c, const cJSON *sc, int depth) {
    if (c->failed) return -1;
    if (depth > KVT_JG_MAX_DEPTH) return fail(c, "the schema nests deeper than %d levels", KVT_JG_MAX_DEPTH);
    if (cJSON_IsTrue(sc)) return any_node(c);
    if (cJSON_IsFalse(sc)) return fail(c, "unsupported 'false' schema (no value can match it)");
    if (!cJSON_IsObject(sc)) return fail(c, "a schema must be an object");
    const char *implied = NULL, *implied_by = NULL;
    for (const cJSON *k = sc->child; k; k = k->next) {
        const char *t = keyword_type(k->string);
        if (t && t[0] == '?') return fail(c, "unsupported schema keyword '%.64s'", k->string);
        if (t && !implied) implied = t, implied_by = k->string;
    }
    if (cJSON_GetObjectItemCaseSensitive(sc, "$ref")) return compile_ref(c, sc, depth);
    if (cJSON_GetObjectItemCaseSensitive(sc, "allOf")) return compile_allof(c, sc, depth);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(sc, "type");
    const cJSON *cst = cJSON_GetObjectItemCaseSensitive(sc, "const");
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(sc, "enum");
    if (type && !cJSON_IsString(type) && !cJSON_IsArray(type))
        return fail(c, "'type' must be a string or an array of strings");
    /* enum and const constrain the value completely; a type beside them filters them */
    if (cst) return compile_lits(c, cst, 1, type);
    if (en) {
        if (!cJSON_IsArray(en)) return fail(c, "'enum' must be an array");
        return compile_lits(c, en, 0, type);
    }
    const cJSON *any_of = cJSON_GetObjectItemCaseSensitive(sc, "anyOf");
    const cJSON *one_of = cJSON_GetObjectItemCaseSensitive(sc, "oneOf");
    if (any_of || one_of) {
        const char *word = any_of ? "anyOf" : "oneOf";
        if (any_of && one_of) return fail(c, "unsupported 'anyOf' beside 'oneOf' (wrap one in 'allOf')");
        if (type || implied) return fail(c, "unsupported '%s' beside '%s'", word, type ? "type" : implied_by);
        return compile_union(c, any_of ? any_of : one_of, word, depth);
    }
    if (cJSON_IsString(type)) return compile_type(c, sc, type->valuestring, depth);
    if (cJSON_IsArray(type)) {
        int32_t n = cJSON_GetArraySize(type);
        if (!n || n > 7) return fail(c, "'type' must list 1 to 7 types");
        int32_t u = new_node(c, JN_UNION);
        node_alloc(c, u, n, 0);
        node(c, u)->n = n;
        int k = 0;
        for (const cJSON *t = type->child; t; t = t->next, k++) {
            if (!cJSON_IsString(t)) return fail(c, "'type' must be a string or an array of strings");
            int32_t bi = compile_type(c, sc, t->valuestring, depth);
            if (bi < 0) return -1;
            node(c, u)->child[k] = bi;
        }
        return u;
    }
    /* no type: the one the keywords imply (a value of another type would ignore them; this one keeps them) */
    if (implied) return compile_type(c, sc, implied, depth);
    return any_node(c);
}

static void compiler_init(compiler *c, const cJSON *root, char *err, size_t cap) {
    memset(c, 0, sizeof *c);
    c->s = kvt_xcalloc(1, sizeof *c->s);
    c->err = err;
    c->cap = cap;
    c->any = c->any_object = -1;
    c->root = root;
    if (cap) err[0] = 0;
    c->s->any_string = string_node(c, 0, JG_NO_LIMIT);
}

static int compiler_end(compiler *c, int32_t root, kvt_jg_schema **out) {
    if (root >= 0 && !c->failed) link_schema(c, &root);
    for (int32_t i = 0; i < c->n_owned; i++) cJSON_Delete(c->owned[i]);
    free(c->owned);
    free(c->refs);
    free(c->oneofs);
    if (root < 0 || c->failed) {
        kvt_jg_schema_free(c->s);
        *out = NULL;
        return KVT_EARG;
    }
    c->s->root = root;
    *out = c->s;
    return 0;
}

int kvt_jg_schema_compile(const cJSON *schema, kvt_jg_schema **out, char *err, size_t cap) {
    compiler c;
    compiler_init(&c, schema, err, cap);
    int32_t root;
    if (schema) {
        root = compile(&c, schema, 0);
    } else {
        any_node(&c); /* json_object: an object, anything inside */
        root = c.any_object;
    }
    return compiler_end(&c, root, out);
}

int kvt_jg_schema_tagged(int n, const char *const *heads, const cJSON *const *schemas, const char *const *tails,
                         kvt_jg_schema **out, char *err, size_t cap) {
    compiler c;
    compiler_init(&c, NULL, err, cap);
    if (n < 1 || n > KVT_JG_MAX_SET) {
        fail(&c, "a choice of 1 to %d alternatives is supported", KVT_JG_MAX_SET);
        return compiler_end(&c, -1, out);
    }
    for (int i = 0; i < n && !c.failed; i++)
        for (int j = 0; j < n; j++)
            if (i != j && (!*heads[i] || !strncmp(heads[i], heads[j], strlen(heads[i]))))
                fail(&c, "alternative %d's head is empty or a prefix of another's", i);
    int32_t t = c.failed ? -1 : new_node(&c, JN_TAGGED);
    if (t >= 0) {
        node_alloc(&c, t, n, 1);
        node(&c, t)->n = n;
    }
    for (int i = 0; i < n && !c.failed; i++) {
        int32_t v;
        if (schemas[i]) {
            char seg[32];
            snprintf(seg, sizeof seg, "%d", i);
            c.root = schemas[i]; /* each function's parameters are their own document for $ref */
            v = compile_at(&c, schemas[i], 0, seg);
        } else {
            any_node(&c);
            v = c.any_object;
        }
        if (v < 0) break;
        jnode *nd = node(&c, t);
        nd->s[i] = kvt_xstrdup(heads[i]);
        nd->slen[i] = (int32_t)strlen(heads[i]);
        nd->t[i] = kvt_xstrdup(tails[i]);
        nd->tlen[i] = (int32_t)strlen(tails[i]);
        nd->child[i] = v;
    }
    return compiler_end(&c, c.failed ? -1 : t, out);
}

void kvt_jg_schema_free(kvt_jg_schema *s) {
    if (!s) return;
    kvt_gbnf_free(s->gbnf);
    for (int32_t i = 0; i < s->n_nodes; i++) {
        jnode *n = &s->nodes[i];
        for (int32_t k = 0; k < n->n; k++) {
            if (n->s) free(n->s[k]);
            if (n->t) free(n->t[k]);
        }
        free(n->s);
        free(n->slen);
        free(n->child);
        free(n->t);
        free(n->tlen);
        kvt_jrx_free(n->rx);
    }
    free(s->nodes);
    free(s);
}

/* Here beside kvt_jg_schema_free, which lives with the compiler (kvt_runtime_json), not the matcher. */
void kvt_jg_lazy_spec_free(kvt_jg_lazy_spec *s) {
    if (!s) return;
    free(s->trigger);
    free(s->end);
    kvt_jg_schema_free(s->first);
    kvt_jg_schema_free(s->next);
    free(s);
}
