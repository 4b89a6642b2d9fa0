// SPDX-License-Identifier: MIT
/* JSON Schema (the subset json_grammar.h states) compiled into the node graph
 * json_grammar.c matches against. Every keyword is either understood,
 * accepted as an annotation, or refused with a message that names it and
 * where it sits, so a schema never constrains less than it says. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "json_grammar_impl.h"

#define PATH_MAX_LEN 160 /* bytes of the schema path in error messages */
#define NO_LIMIT UINT32_MAX

typedef struct {
    kvt_jg_schema *s;
    char *err;
    size_t cap;
    int failed;
    char path[PATH_MAX_LEN];
    int32_t any; /* the ANY union, built on first use (-1: not yet) */
} compiler;

static int fail(compiler *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(compiler *c, const char *fmt, ...) {
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

static int32_t new_node(compiler *c, jnode_kind kind) {
    kvt_jg_schema *s = c->s;
    if (s->n_nodes == s->cap_nodes) {
        s->cap_nodes = s->cap_nodes ? 2 * s->cap_nodes : 16;
        s->nodes = kvt_xrealloc(s->nodes, (size_t)s->cap_nodes * sizeof *s->nodes);
    }
    jnode *n = &s->nodes[s->n_nodes];
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->max_items = n->max_len = NO_LIMIT;
    for (int i = 0; i < JC_COUNT; i++) n->branch[i] = -1;
    return s->n_nodes++;
}

static jnode *node(compiler *c, int32_t i) { return &c->s->nodes[i]; }

/* Gives node i room for n entries of s/slen/child (and t/tlen when tails). */
static void node_alloc(compiler *c, int32_t i, int32_t n, int tails) {
    jnode *nd = node(c, i);
    nd->s = kvt_xcalloc((size_t)(n ? n : 1), sizeof *nd->s);
    nd->slen = kvt_xcalloc((size_t)(n ? n : 1), sizeof *nd->slen);
    nd->child = kvt_xcalloc((size_t)(n ? n : 1), sizeof *nd->child);
    if (tails) {
        nd->t = kvt_xcalloc((size_t)(n ? n : 1), sizeof *nd->t);
        nd->tlen = kvt_xcalloc((size_t)(n ? n : 1), sizeof *nd->tlen);
    }
}

static int first_class(unsigned char b) {
    switch (b) {
    case '{': return JC_OBJECT;
    case '[': return JC_ARRAY;
    case '"': return JC_STRING;
    case 't': return JC_TRUE;
    case 'f': return JC_FALSE;
    case 'n': return JC_NULL;
    default: return (b == '-' || (b >= '0' && b <= '9')) ? JC_NUMBER : -1;
    }
}

/* A node of literal texts (enum, const, true/false/null). */
static int32_t lits_node(compiler *c, const char *const *texts, int32_t n) {
    int32_t i = new_node(c, JN_LITS);
    node_alloc(c, i, n, 0);
    jnode *nd = node(c, i);
    nd->n = n;
    nd->min_bytes = INT32_MAX;
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
    node(c, i)->min_bytes = 2 + (int32_t)KVT_MIN(min_len, (uint32_t)INT32_MAX / 2);
    return i;
}

/* Any JSON value: objects with any keys, arrays of anything, strings,
 * numbers, true, false, null. One node graph per schema, built once. */
static int32_t any_node(compiler *c) {
    if (c->any >= 0) return c->any;
    int32_t u = new_node(c, JN_UNION);
    c->any = u;
    node(c, u)->min_bytes = 1; /* "0" */
    int32_t obj = new_node(c, JN_OBJECT);
    node(c, obj)->free_keys = 1;
    node(c, obj)->free_value = u;
    node(c, obj)->min_bytes = 2;
    int32_t arr = new_node(c, JN_ARRAY);
    node_alloc(c, arr, 1, 0);
    node(c, arr)->child[0] = u;
    node(c, arr)->min_bytes = 2;
    int32_t str = c->s->any_string;
    int32_t num = new_node(c, JN_NUMBER);
    node(c, num)->min_bytes = 1;
    static const char *const tfn[] = {"true", "false", "null"};
    int32_t lit = lits_node(c, tfn, 3);
    jnode *n = node(c, u);
    n->branch[JC_OBJECT] = obj;
    n->branch[JC_ARRAY] = arr;
    n->branch[JC_STRING] = str;
    n->branch[JC_NUMBER] = num;
    n->branch[JC_TRUE] = n->branch[JC_FALSE] = n->branch[JC_NULL] = lit;
    return u;
}

/* Adds the classes node i's values can start with into union u. */
static int union_add(compiler *c, int32_t u, int32_t i) {
    const jnode *b = node(c, i);
    int cls[JC_COUNT] = {0};
    switch (b->kind) {
    case JN_OBJECT: cls[JC_OBJECT] = 1; break;
    case JN_ARRAY: cls[JC_ARRAY] = 1; break;
    case JN_STRING: cls[JC_STRING] = 1; break;
    case JN_NUMBER:
    case JN_INTEGER: cls[JC_NUMBER] = 1; break;
    case JN_LITS:
        for (int32_t k = 0; k < b->n; k++) {
            int f = first_class((unsigned char)b->s[k][0]);
            if (f >= 0) cls[f] = 1;
        }
        break;
    case JN_UNION:
        for (int k = 0; k < JC_COUNT; k++) cls[k] = b->branch[k] >= 0;
        break;
    case JN_TAGGED: return fail(c, "a tagged choice cannot be a branch");
    }
    jnode *un = node(c, u);
    for (int k = 0; k < JC_COUNT; k++) {
        if (!cls[k]) continue;
        if (un->branch[k] >= 0 && un->branch[k] != i)
            return fail(c,
                        "unsupported 'anyOf'/'type' list: two branches can start alike (only branches of "
                        "different kinds are supported)");
        un->branch[k] = b->kind == JN_UNION ? b->branch[k] : i;
    }
    un->min_bytes = KVT_MIN(un->min_bytes, b->min_bytes);
    return 0;
}

static int32_t compile(compiler *c, const cJSON *sc, int depth);

/* Appends "/seg" to the path for the duration of one compile. */
static int32_t compile_at(compiler *c, const cJSON *sc, int depth, const char *seg) {
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

static int32_t compile_object(compiler *c, const cJSON *sc, int depth) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(sc, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(sc, "required");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(sc, "additionalProperties");
    if (props && !cJSON_IsObject(props)) return fail(c, "'properties' must be an object");
    if (req && !cJSON_IsArray(req)) return fail(c, "'required' must be an array of property names");
    if (addl && !cJSON_IsBool(addl) && !cJSON_IsObject(addl))
        return fail(c, "'additionalProperties' must be a boolean or a schema");
    int32_t n = props ? cJSON_GetArraySize(props) : 0;
    if (n > KVT_JG_MAX_SET) return fail(c, "more than %d properties in one object", KVT_JG_MAX_SET);
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
    jnode *nd = node(c, i);
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next) {
        int32_t at = -1;
        for (int32_t q = 0; q < n && cJSON_IsString(r); q++)
            if (!strcmp(cJSON_GetArrayItem(props, q)->string, r->valuestring)) at = q;
        if (at < 0)
            return fail(c, "'required' names %s%.64s%s, which is not in 'properties'", cJSON_IsString(r) ? "'" : "",
                        cJSON_IsString(r) ? r->valuestring : "a non-string", cJSON_IsString(r) ? "'" : "");
        nd->required |= 1ull << at;
    }
    if (!n && !cJSON_IsFalse(addl)) {
        /* no declared properties: any keys, with values of additionalProperties' schema (or anything) */
        int32_t v = cJSON_IsObject(addl) ? compile_at(c, addl, depth + 1, "additionalProperties") : any_node(c);
        if (v < 0) return -1;
        nd = node(c, i);
        nd->free_keys = 1;
        nd->free_value = v;
    }
    int32_t min = 2, nreq = 0;
    for (int32_t q = 0; q < n; q++)
        if (nd->required >> q & 1) {
            min += nd->slen[q] + 1 + node(c, nd->child[q])->min_bytes;
            nreq++;
        }
    nd->min_bytes = min + (nreq ? nreq - 1 : 0);
    return i;
}

static int32_t compile_array(compiler *c, const cJSON *sc, int depth) {
    uint32_t lo = 0, hi = NO_LIMIT;
    if (get_count(c, sc, "minItems", &lo) || get_count(c, sc, "maxItems", &hi)) return -1;
    if (lo > hi) return fail(c, "'minItems' is above 'maxItems'");
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(sc, "items");
    int32_t it = items ? compile_at(c, items, depth + 1, "items") : any_node(c);
    if (it < 0) return -1;
    int32_t i = new_node(c, JN_ARRAY);
    node_alloc(c, i, 1, 0);
    jnode *nd = node(c, i);
    nd->child[0] = it;
    nd->min_items = lo;
    nd->max_items = hi;
    int64_t min = 2 + (lo ? (int64_t)lo * node(c, it)->min_bytes + lo - 1 : 0);
    if (min > INT32_MAX / 4) return fail(c, "'minItems' makes the shortest array too long");
    nd->min_bytes = (int32_t)min;
    return i;
}

/* The literal texts of enum or const (scalars only). */
static int32_t compile_lits(compiler *c, const cJSON *list, int is_const) {
    int32_t n = is_const ? 1 : cJSON_GetArraySize(list);
    if (n < 1 || n > KVT_JG_MAX_SET) return fail(c, "'enum' must hold 1 to %d values", KVT_JG_MAX_SET);
    char **texts = kvt_xcalloc((size_t)n, sizeof *texts);
    int32_t k = 0, bad = 0;
    for (const cJSON *v = is_const ? list : list->child; v && k < n; v = v->next, k++) {
        if (cJSON_IsObject(v) || cJSON_IsArray(v)) bad = 1;
        texts[k] = bad ? NULL : cJSON_PrintUnformatted(v);
        if (is_const) break;
    }
    int32_t i = bad ? fail(c, "unsupported '%s' of an object or array (scalars only)", is_const ? "const" : "enum")
                    : lits_node(c, (const char *const *)texts, n);
    for (k = 0; k < n; k++) cJSON_free(texts[k]);
    free(texts);
    return i;
}

/* Numbers: the bounds a byte automaton can keep are the ones clients send
 * most: none, a minimum of 0 (exclusive: a positive integer), and bounds at
 * or past +-(10^15 - 1), which the digit limit already keeps (zod's safe
 * integers). Others are refused by name. */
static int32_t compile_number(compiler *c, const cJSON *sc, int integer) {
    int32_t i = new_node(c, integer ? JN_INTEGER : JN_NUMBER);
    node(c, i)->min_bytes = 1;
    static const char *const bounds[] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    for (size_t k = 0; k < KVT_ARRAY_LEN(bounds); k++) {
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(sc, bounds[k]);
        if (!b) continue;
        if (!cJSON_IsNumber(b)) return fail(c, "'%s' must be a number", bounds[k]);
        double v = b->valuedouble;
        int low = k < 2, exclusive = k & 1;
        jnode *n = node(c, i);
        if (low ? v <= -KVT_JG_NUMBER_LIMIT : v >= KVT_JG_NUMBER_LIMIT) n->no_exp = 1;
        else if (low && v == 0 && !exclusive) n->nonneg = 1;
        else if (low && v == 0 && exclusive && integer) n->nonneg = n->positive = 1;
        else return fail(c, "unsupported '%s' of %g (0 or beyond +-%.0f only)", bounds[k], v, KVT_JG_NUMBER_LIMIT);
    }
    if (node(c, i)->nonneg && !integer) node(c, i)->no_exp = 1;
    return i;
}

static int32_t compile_type(compiler *c, const cJSON *sc, const char *type, int depth) {
    if (!strcmp(type, "object")) return compile_object(c, sc, depth);
    if (!strcmp(type, "array")) return compile_array(c, sc, depth);
    if (!strcmp(type, "string")) {
        uint32_t lo = 0, hi = NO_LIMIT;
        if (get_count(c, sc, "minLength", &lo) || get_count(c, sc, "maxLength", &hi)) return -1;
        if (lo > hi) return fail(c, "'minLength' is above 'maxLength'");
        if (lo > 1u << 20) return fail(c, "'minLength' is too large");
        return string_node(c, lo, hi);
    }
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

/* Keywords that only describe and never constrain. */
static const char *const ANNOTATIONS[] = {"title", "description", "$schema", "$id", "default", "examples", "$comment"};
/* Keywords compile() understands. */
static const char *const UNDERSTOOD[] = {"type",
                                         "properties",
                                         "required",
                                         "additionalProperties",
                                         "items",
                                         "minItems",
                                         "maxItems",
                                         "minLength",
                                         "maxLength",
                                         "enum",
                                         "const",
                                         "anyOf",
                                         "minimum",
                                         "maximum",
                                         "exclusiveMinimum",
                                         "exclusiveMaximum"};

static int known_keyword(const char *k) {
    for (size_t i = 0; i < KVT_ARRAY_LEN(ANNOTATIONS); i++)
        if (!strcmp(k, ANNOTATIONS[i])) return 1;
    for (size_t i = 0; i < KVT_ARRAY_LEN(UNDERSTOOD); i++)
        if (!strcmp(k, UNDERSTOOD[i])) return 1;
    return 0;
}

static int32_t compile(compiler *c, const cJSON *sc, int depth) {
    if (c->failed) return -1;
    if (depth > KVT_JG_MAX_DEPTH) return fail(c, "the schema nests deeper than %d levels", KVT_JG_MAX_DEPTH);
    if (cJSON_IsTrue(sc)) return any_node(c);
    if (!cJSON_IsObject(sc)) return fail(c, "a schema must be an object");
    for (const cJSON *k = sc->child; k; k = k->next)
        if (!known_keyword(k->string)) return fail(c, "unsupported schema keyword '%.64s'", k->string);
    const cJSON *cst = cJSON_GetObjectItemCaseSensitive(sc, "const");
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(sc, "enum");
    const cJSON *any_of = cJSON_GetObjectItemCaseSensitive(sc, "anyOf");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(sc, "type");
    /* enum and const constrain the value completely; a type beside them says nothing more */
    if (cst) return compile_lits(c, cst, 1);
    if (en) {
        if (!cJSON_IsArray(en)) return fail(c, "'enum' must be an array");
        return compile_lits(c, en, 0);
    }
    if (any_of) {
        if (type) return fail(c, "unsupported 'anyOf' beside 'type'");
        if (!cJSON_IsArray(any_of) || !cJSON_GetArraySize(any_of)) return fail(c, "'anyOf' must be a non-empty array");
        int32_t u = new_node(c, JN_UNION);
        node(c, u)->min_bytes = INT32_MAX;
        int k = 0;
        for (const cJSON *b = any_of->child; b; b = b->next, k++) {
            char seg[32];
            snprintf(seg, sizeof seg, "anyOf/%d", k);
            int32_t bi = compile_at(c, b, depth + 1, seg);
            if (bi < 0 || union_add(c, u, bi)) return -1;
        }
        return u;
    }
    if (cJSON_IsString(type)) return compile_type(c, sc, type->valuestring, depth);
    if (cJSON_IsArray(type)) {
        int32_t u = new_node(c, JN_UNION);
        node(c, u)->min_bytes = INT32_MAX;
        for (const cJSON *t = type->child; t; t = t->next) {
            if (!cJSON_IsString(t)) return fail(c, "'type' must be a string or an array of strings");
            int32_t bi = compile_type(c, sc, t->valuestring, depth);
            if (bi < 0 || union_add(c, u, bi)) return -1;
        }
        if (node(c, u)->min_bytes == INT32_MAX) return fail(c, "'type' must not be empty");
        return u;
    }
    if (type) return fail(c, "'type' must be a string or an array of strings");
    if (cJSON_GetObjectItemCaseSensitive(sc, "properties")) return compile_object(c, sc, depth);
    if (cJSON_GetObjectItemCaseSensitive(sc, "items")) return compile_array(c, sc, depth);
    return any_node(c);
}

static void compiler_init(compiler *c, char *err, size_t cap) {
    memset(c, 0, sizeof *c);
    c->s = kvt_xcalloc(1, sizeof *c->s);
    c->err = err;
    c->cap = cap;
    c->any = -1;
    if (cap) err[0] = 0;
    c->s->any_string = string_node(c, 0, NO_LIMIT);
}

static int compiler_end(compiler *c, int32_t root, kvt_jg_schema **out) {
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
    compiler_init(&c, err, cap);
    int32_t root;
    if (schema) {
        root = compile(&c, schema, 0);
    } else {
        /* json_object: an object, anything inside */
        root = node(&c, any_node(&c))->branch[JC_OBJECT];
    }
    return compiler_end(&c, root, out);
}

int kvt_jg_schema_tagged(int n, const char *const *heads, const cJSON *const *schemas, const char *const *tails,
                         kvt_jg_schema **out, char *err, size_t cap) {
    compiler c;
    compiler_init(&c, err, cap);
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
        node(&c, t)->min_bytes = INT32_MAX;
    }
    for (int i = 0; i < n && !c.failed; i++) {
        int32_t v;
        if (schemas[i]) {
            char seg[32];
            snprintf(seg, sizeof seg, "%d", i);
            v = compile_at(&c, schemas[i], 0, seg);
        } else {
            v = node(&c, any_node(&c))->branch[JC_OBJECT];
        }
        if (v < 0) break;
        jnode *nd = node(&c, t);
        nd->s[i] = kvt_xstrdup(heads[i]);
        nd->slen[i] = (int32_t)strlen(heads[i]);
        nd->t[i] = kvt_xstrdup(tails[i]);
        nd->tlen[i] = (int32_t)strlen(tails[i]);
        nd->child[i] = v;
        nd->min_bytes = KVT_MIN(nd->min_bytes, nd->slen[i] + node(&c, v)->min_bytes + nd->tlen[i]);
    }
    return compiler_end(&c, c.failed ? -1 : t, out);
}

void kvt_jg_schema_free(kvt_jg_schema *s) {
    if (!s) return;
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
    }
    free(s->nodes);
    free(s);
}
