// SPDX-License-Identifier: MIT
/* The parts of schema compiling that see more than one schema object:
 * $ref (JSON pointers into the same document, recursion included), allOf
 * (merged into one schema where the branches agree), the formats, and the
 * final pass that links references, flattens unions and measures every node
 * (the shortest value and its nesting, found as a fixed point so recursive
 * schemas get their shortest finite value). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "json_schema_impl.h"

#define MAX_MERGE_DEPTH 16 /* allOf inside allOf (or $ref) while merging */

/* ---- formats -------------------------------------------------------------------- */

#define DATE_RE \
    "[12]\\d{3}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)|02-(?:0[1-9]|1\\d|" \
    "2[0-8]))"
#define TIME_RE "(?:[01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(?:\\.\\d{1,6})?(?:Z|[+-](?:[01]\\d|2[0-3]):[0-5]\\d)"
#define OCTET_RE "(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)"
#define URI_CHAR "(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-F]{2})"

/* Each format as a pattern of ours. They are stricter than the RFCs (no
 * 29 February, no leap second, lowercase version-1..8 UUIDs, dotted email
 * domains with a letter TLD), so what they produce passes any checker. */
static const struct {
    const char *name, *re;
} FORMATS[] = {
    {"date", DATE_RE},
    {"time", TIME_RE},
    {"date-time", DATE_RE "T" TIME_RE},
    {"email", "[A-Za-z0-9_+-]+(?:\\.[A-Za-z0-9_+-]+)*@(?:[A-Za-z0-9]+(?:-+[A-Za-z0-9]+)*\\.)+[A-Za-z]{2,}"},
    {"uuid", "[0-9a-f]{8}-[0-9a-f]{4}-[1-8][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"},
    {"uri",
     "[a-z][a-z0-9+.-]*://[A-Za-z0-9]+(?:[.-][A-Za-z0-9]+)*(?::[0-9]{1,5})?(?:/" URI_CHAR "*)*(?:\\?(?:" URI_CHAR
     "|[/?])*)?"},
    {"ipv4", "(?:" OCTET_RE "\\.){3}" OCTET_RE},
};

const char *format_pattern(const char *format) {
    for (size_t i = 0; i < KVT_ARRAY_LEN(FORMATS); i++)
        if (!strcmp(format, FORMATS[i].name)) return FORMATS[i].re;
    return NULL;
}

/* ---- $ref ---------------------------------------------------------------------------- */

/* The schema a '#...' reference names in the current document. */
static const cJSON *resolve(compiler *c, const char *ref) {
    if (ref[0] != '#' || !c->root)
        return fail(c, "unsupported '$ref' \"%.64s\" (only '#...' references inside this schema)", ref), NULL;
    const cJSON *at = c->root;
    const char *p = ref + 1;
    if (*p && *p != '/')
        return fail(c, "unsupported '$ref' \"%.64s\" (a JSON pointer '#/...' is supported)", ref), NULL;
    while (*p == '/') {
        char seg[128];
        size_t n = 0;
        for (p++; *p && *p != '/'; p++) {
            char ch = *p;
            if (ch == '~' && (p[1] == '0' || p[1] == '1')) ch = *++p == '1' ? '/' : '~';
            if (n < sizeof seg - 1) seg[n++] = ch;
        }
        seg[n] = 0;
        at = cJSON_IsArray(at) ? cJSON_GetArrayItem(at, atoi(seg)) : cJSON_GetObjectItemCaseSensitive(at, seg);
        if (!at) return fail(c, "'$ref' \"%.64s\" names nothing in the schema", ref), NULL;
    }
    return at;
}

static int has_constraints(const cJSON *sc, const char *besides) {
    for (const cJSON *k = sc->child; k; k = k->next)
        if (strcmp(k->string, besides) && !is_annotation(k->string)) return 1;
    return 0;
}

int32_t compile_ref(compiler *c, const cJSON *sc, int depth) {
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(sc, "$ref");
    if (!cJSON_IsString(ref)) return fail(c, "'$ref' must be a string");
    if (has_constraints(sc, "$ref")) return compile_allof(c, sc, depth); /* keywords beside $ref apply too */
    const cJSON *target = resolve(c, ref->valuestring);
    if (!target) return -1;
    for (int32_t i = 0; i < c->n_refs; i++)
        if (c->refs[i].target == target) return c->refs[i].node;
    int32_t r = new_node(c, JN_REF);
    node_alloc(c, r, 1, 0);
    node(c, r)->n = 1;
    node(c, r)->child[0] = -1;
    c->refs = kvt_xrealloc(c->refs, (size_t)(c->n_refs + 1) * sizeof *c->refs);
    c->refs[c->n_refs++] = (ref_memo){target, r};
    char saved[PATH_MAX_LEN];
    memcpy(saved, c->path, sizeof saved);
    snprintf(c->path, sizeof c->path, "%s", ref->valuestring + 1);
    int32_t t = compile(c, target, depth + 1);
    memcpy(c->path, saved, sizeof saved);
    if (t < 0) return -1;
    node(c, r)->child[0] = t;
    return r;
}

/* ---- allOf ---------------------------------------------------------------------------- */

static int is_one_of(const char *k, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(k, list[i])) return 1;
    return 0;
}

/* Two values of keyword k that must both hold, as one (into *have). */
static int merge_keyword(compiler *c, cJSON *out, const char *k, const cJSON *v) {
    cJSON *have = cJSON_GetObjectItemCaseSensitive(out, k);
    if (!have) return cJSON_AddItemToObject(out, k, cJSON_Duplicate(v, 1)), 0;
    if (cJSON_Compare(have, v, 1)) return 0;
    static const char *const lows[] = {"minimum", "exclusiveMinimum", "minLength", "minItems"};
    static const char *const highs[] = {"maximum", "exclusiveMaximum", "maxLength", "maxItems"};
    int low = is_one_of(k, lows, 4), high = is_one_of(k, highs, 4);
    if ((low || high) && cJSON_IsNumber(have) && cJSON_IsNumber(v)) {
        if (low ? v->valuedouble > have->valuedouble : v->valuedouble < have->valuedouble)
            cJSON_SetNumberValue(have, v->valuedouble);
        return 0;
    }
    if (!strcmp(k, "required") && cJSON_IsArray(have) && cJSON_IsArray(v)) {
        for (const cJSON *r = v->child; r; r = r->next) {
            int dup = 0;
            for (const cJSON *h = have->child; h; h = h->next) dup |= cJSON_Compare(h, r, 1);
            if (!dup) cJSON_AddItemToArray(have, cJSON_Duplicate(r, 1));
        }
        return 0;
    }
    if (!strcmp(k, "properties") && cJSON_IsObject(have) && cJSON_IsObject(v)) {
        for (const cJSON *p = v->child; p; p = p->next) {
            cJSON *old = cJSON_GetObjectItemCaseSensitive(have, p->string);
            if (!old) {
                cJSON_AddItemToObject(have, p->string, cJSON_Duplicate(p, 1));
            } else if (!cJSON_Compare(old, p, 1)) {
                cJSON *both = cJSON_CreateObject(), *list = cJSON_AddArrayToObject(both, "allOf");
                cJSON_AddItemToArray(list, cJSON_Duplicate(old, 1));
                cJSON_AddItemToArray(list, cJSON_Duplicate(p, 1));
                cJSON_ReplaceItemInObjectCaseSensitive(have, p->string, both);
            }
        }
        return 0;
    }
    if (!strcmp(k, "type") && cJSON_IsString(have) && cJSON_IsString(v)) {
        int ni = (!strcmp(have->valuestring, "integer") && !strcmp(v->valuestring, "number")) ||
            (!strcmp(have->valuestring, "number") && !strcmp(v->valuestring, "integer"));
        if (ni) return cJSON_SetValuestring(have, "integer") ? 0 : -1;
    }
    if (!strcmp(k, "additionalProperties") && (cJSON_IsFalse(have) || cJSON_IsFalse(v))) {
        cJSON_ReplaceItemInObjectCaseSensitive(out, k, cJSON_CreateFalse());
        return 0;
    }
    return fail(c, "unsupported 'allOf': two branches set '%.48s' differently", k);
}

/* Merges schema b (its own keywords, its allOf branches, what its $ref
 * names) into out. Branches that close their object (additionalProperties)
 * go to closed, to be checked against the merged properties. */
static int merge_into(compiler *c, cJSON *out, const cJSON *b, int depth, const cJSON **closed, int *n_closed) {
    if (depth > MAX_MERGE_DEPTH) return fail(c, "unsupported 'allOf'/'$ref' nesting deeper than %d", MAX_MERGE_DEPTH);
    if (cJSON_IsTrue(b)) return 0;
    if (!cJSON_IsObject(b)) return fail(c, "an 'allOf' branch must be a schema object");
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(b, "$ref");
    if (ref) {
        const cJSON *t = cJSON_IsString(ref) ? resolve(c, ref->valuestring) : NULL;
        if (!t || merge_into(c, out, t, depth + 1, closed, n_closed)) return fail(c, "'$ref' must name a schema");
    }
    const cJSON *all = cJSON_GetObjectItemCaseSensitive(b, "allOf");
    if (all && (!cJSON_IsArray(all) || !cJSON_GetArraySize(all))) return fail(c, "'allOf' must be a non-empty array");
    for (const cJSON *x = all ? all->child : NULL; x; x = x->next)
        if (merge_into(c, out, x, depth + 1, closed, n_closed)) return -1;
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(b, "additionalProperties");
    if (addl && !cJSON_IsTrue(addl) && *n_closed < KVT_JG_MAX_SET) closed[(*n_closed)++] = b;
    for (const cJSON *k = b->child; k; k = k->next) {
        if (!strcmp(k->string, "$ref") || !strcmp(k->string, "allOf") || is_annotation(k->string)) continue;
        if (merge_keyword(c, out, k->string, k)) return -1;
    }
    return 0;
}

int32_t compile_allof(compiler *c, const cJSON *sc, int depth) {
    cJSON *out = cJSON_CreateObject();
    c->owned = kvt_xrealloc(c->owned, (size_t)(c->n_owned + 1) * sizeof *c->owned);
    c->owned[c->n_owned++] = out;
    const cJSON *closed[KVT_JG_MAX_SET];
    int n_closed = 0;
    if (merge_into(c, out, sc, 0, closed, &n_closed)) return -1;
    /* a branch that closes its object allows no property another branch adds */
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(out, "properties");
    for (int i = 0; i < n_closed; i++) {
        const cJSON *own = cJSON_GetObjectItemCaseSensitive(closed[i], "properties");
        for (const cJSON *p = props ? props->child : NULL; p; p = p->next)
            if (!cJSON_GetObjectItemCaseSensitive(own, p->string))
                return fail(c,
                            "unsupported 'allOf': a branch with 'additionalProperties' does not declare '%.48s', "
                            "which another branch adds",
                            p->string);
    }
    size_t len = strlen(c->path);
    snprintf(c->path + len, sizeof c->path - len, "%s", cJSON_GetObjectItemCaseSensitive(sc, "allOf") ? "/allOf" : "");
    int32_t r = compile(c, out, depth + 1);
    c->path[len] = 0;
    return r;
}

/* ---- linking and measuring ------------------------------------------------------------ */

/* The node a reference finally names. */
static int32_t deref(compiler *c, int32_t i) {
    for (int32_t hops = 0; i >= 0 && node(c, i)->kind == JN_REF; hops++) {
        if (hops > c->s->n_nodes) return fail(c, "a '$ref' cycle that names only references");
        i = node(c, i)->child[0];
    }
    return i;
}

/* Union u's branches, with nested unions opened (each branch once). */
static void flatten(compiler *c, int32_t u, int32_t *list, int32_t *n, uint8_t *seen) {
    seen[u] = 1;
    const jnode *un = node(c, u);
    for (int32_t k = 0; k < un->n; k++) {
        int32_t b = un->child[k];
        if (b < 0 || seen[b]) continue;
        if (node(c, b)->kind == JN_UNION) {
            flatten(c, b, list, n, seen);
            continue;
        }
        seen[b] = 1;
        if (*n < KVT_JG_MAX_SET) list[(*n)++] = b;
    }
}

static int32_t sat(int64_t v) { return v >= JG_INF ? JG_INF : (int32_t)v; }

static uint8_t first_of(const jnode *n) {
    switch (n->kind) {
    case JN_OBJECT: return 1u << JC_OBJECT;
    case JN_ARRAY: return 1u << JC_ARRAY;
    case JN_STRING: return 1u << JC_STRING;
    case JN_NUMBER:
    case JN_INTEGER: return 1u << JC_NUMBER;
    case JN_LITS: {
        uint8_t f = 0;
        for (int32_t k = 0; k < n->n; k++) {
            char b = n->s[k][0];
            f |= (uint8_t)(b == '{'       ? 1u << JC_OBJECT
                               : b == '[' ? 1u << JC_ARRAY
                               : b == '"' ? 1u << JC_STRING
                               : b == 't' ? 1u << JC_TRUE
                               : b == 'f' ? 1u << JC_FALSE
                               : b == 'n' ? 1u << JC_NULL
                                          : 1u << JC_NUMBER);
        }
        return f;
    }
    default: return 0;
    }
}

/* Recomputes node i's shortest value and nesting from its children; 1 if
 * either went down. */
static int measure(compiler *c, int32_t i) {
    jnode *n = node(c, i);
    int64_t b = JG_INF;
    int32_t nest = JG_INF;
    if (n->kind == JN_OBJECT) {
        int32_t nreq = 0;
        b = 2, nest = 1;
        for (int32_t q = 0; q < n->n; q++)
            if (n->required >> q & 1) {
                const jnode *ch = node(c, n->child[q]);
                b += n->slen[q] + 1 + ch->min_bytes + (nreq++ ? 1 : 0);
                nest = KVT_MAX(nest, 1 + KVT_MAX(ch->nest, 1));
            }
    } else if (n->kind == JN_ARRAY) {
        b = 2, nest = 1;
        int32_t np = n->n - 1;
        for (uint32_t it = 0; it < n->min_items && it < (uint32_t)np; it++) {
            const jnode *ch = node(c, n->child[1 + it]);
            b += ch->min_bytes + (it ? 1 : 0);
            nest = KVT_MAX(nest, 1 + ch->nest);
        }
        if (n->min_items > (uint32_t)np) {
            const jnode *ch = n->child[0] >= 0 ? node(c, n->child[0]) : NULL;
            int64_t more = n->min_items - (uint32_t)np;
            b = ch ? b + more * (ch->min_bytes + 1) - (np ? 0 : 1) : JG_INF;
            nest = ch ? KVT_MAX(nest, 1 + ch->nest) : nest;
        }
    } else if (n->kind == JN_UNION || n->kind == JN_TAGGED) {
        for (int32_t k = 0; k < n->n; k++) {
            const jnode *ch = node(c, n->child[k]);
            int64_t v = ch->min_bytes + (n->kind == JN_TAGGED ? n->slen[k] + n->tlen[k] : 0);
            int32_t ne = ch->nest + (n->kind == JN_TAGGED);
            if (v < b || (v == b && ne < nest)) b = v, nest = ne;
        }
    } else {
        return 0;
    }
    int32_t mb = sat(b);
    if (mb > n->min_bytes || (mb == n->min_bytes && nest >= n->nest)) return 0;
    n->min_bytes = mb;
    n->nest = KVT_MIN(nest, JG_INF);
    return 1;
}

/* Whether no value can match both a and b (for oneOf): different first
 * bytes, different literals, or objects told apart by a required property
 * whose literals differ (a discriminator). */
static int disjoint(compiler *c, int32_t ia, int32_t ib) {
    const jnode *a = node(c, ia), *b = node(c, ib);
    if (!(a->first & b->first)) return 1;
    if (a->kind == JN_LITS && b->kind == JN_LITS) {
        for (int32_t i = 0; i < a->n; i++)
            for (int32_t j = 0; j < b->n; j++)
                if (!strcmp(a->s[i], b->s[j])) return 0;
        return 1;
    }
    if (a->kind != JN_OBJECT || b->kind != JN_OBJECT) return 0;
    for (int32_t i = 0; i < a->n; i++)
        for (int32_t j = 0; j < b->n; j++)
            if ((a->required >> i & 1) && (b->required >> j & 1) && !strcmp(a->s[i], b->s[j]) &&
                node(c, a->child[i])->kind == JN_LITS && node(c, b->child[j])->kind == JN_LITS &&
                disjoint(c, a->child[i], b->child[j]))
                return 1;
    return 0;
}

static int check_oneofs(compiler *c) {
    for (int32_t k = 0; k < c->n_oneofs; k++) {
        const jnode *u = node(c, c->oneofs[k].node);
        for (int32_t i = 0; i < u->n; i++)
            for (int32_t j = i + 1; j < u->n; j++)
                if (!disjoint(c, u->child[i], u->child[j])) {
                    snprintf(c->path, sizeof c->path, "%s", c->oneofs[k].path);
                    return fail(c,
                                "unsupported 'oneOf': branches %d and %d may both match (give each branch a "
                                "required property with its own 'const', or use 'anyOf')",
                                i, j);
                }
    }
    return 0;
}

/* Long: one pass per stage over every node (references, unions, measure, first bytes, checks). */
int link_schema(compiler *c, int32_t *root) {
    kvt_jg_schema *s = c->s;
    int32_t nn = s->n_nodes;
    c->path[0] = 0;
    for (int32_t i = 0; i < nn && !c->failed; i++) {
        jnode *n = node(c, i);
        if (n->kind != JN_LITS && n->kind != JN_REF)
            for (int32_t k = 0; k < n->n; k++) n->child[k] = deref(c, n->child[k]);
        n->free_value = deref(c, n->free_value);
        n->key_node = deref(c, n->key_node);
    }
    *root = deref(c, *root);
    if (c->failed) return -1;
    uint8_t *seen = kvt_xmalloc((size_t)nn);
    int32_t list[KVT_JG_MAX_SET];
    for (int32_t i = 0; i < nn; i++) {
        if (node(c, i)->kind != JN_UNION) continue;
        int32_t n = 0;
        memset(seen, 0, (size_t)nn);
        flatten(c, i, list, &n, seen);
        jnode *u = node(c, i);
        for (int32_t k = 0; k < u->n; k++) free(u->s[k]);
        free(u->s);
        free(u->slen);
        u->s = kvt_xcalloc((size_t)n + 1, sizeof *u->s);
        u->slen = kvt_xcalloc((size_t)n + 1, sizeof *u->slen);
        u->child = kvt_xrealloc(u->child, ((size_t)n + 1) * sizeof *u->child);
        memcpy(u->child, list, (size_t)n * sizeof *list);
        u->n = n;
    }
    free(seen);
    if (node(c, *root)->kind == JN_UNION && node(c, *root)->n == 1) *root = node(c, *root)->child[0];
    for (int32_t i = 0; i < nn; i++) {
        jnode *n = node(c, i);
        if (n->kind == JN_OBJECT || n->kind == JN_ARRAY || n->kind == JN_UNION || n->kind == JN_TAGGED)
            n->min_bytes = n->nest = JG_INF;
        n->first = first_of(n);
    }
    for (int changed = 1, round = 0; changed && round <= nn + 1; round++) {
        changed = 0;
        for (int32_t i = 0; i < nn; i++) changed |= measure(c, i);
    }
    for (int32_t i = 0; i < nn; i++)
        if (node(c, i)->kind == JN_UNION)
            for (int32_t k = 0; k < node(c, i)->n; k++) node(c, i)->first |= node(c, node(c, i)->child[k])->first;
    if (check_oneofs(c)) return -1;
    const jnode *r = node(c, *root);
    if (r->min_bytes >= JG_INF) return fail(c, "the schema has no finite value (a '$ref' recursion that cannot stop)");
    if (r->nest > KVT_JG_MAX_DEPTH)
        return fail(c, "the schema's shortest value nests %d levels, past the limit of %d", r->nest, KVT_JG_MAX_DEPTH);
    return 0;
}
