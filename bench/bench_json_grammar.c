// SPDX-License-Identifier: MIT
/* The cost of constrained decoding per token: the time of kvt_jg_mask (and
 * kvt_jg_accept) along random walks over a real vocabulary, for json_object,
 * an agent-style tool schema, and the heaviest schema the mask supports
 * (zod-like: formats, a pattern, bounds, a discriminated union, a recursive
 * $ref); and of kvt_gbnf_m_mask (and accept) for two GBNF grammars of the
 * kind people send as llama-server's `grammar`: a whole JSON value (nested
 * objects and arrays, escapes, numbers with fractions and exponents) and a
 * line-oriented record format (alternatives, bounded repetitions, classes),
 * and bulleted free text (a class repeated without bound). The grammars run
 * again without loopsets (kvt_gbnf_m_set_loops: free text's tokens taken in
 * one pass) for comparison; the memo of parse sets stays on in both.
 * All run alternately for ROUNDS rounds; each line is the median round (and
 * the slowest single step). Compare with a decode step's time (bench_engine)
 * for the ratio. Prints numbers only, and the load.
 * usage: bench_json_grammar [VOCAB.gguf] (default ../shared/vocab/ggml-vocab-gpt-2.gguf) */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gbnf.h"
#include "gguf.h"
#include "json_grammar.h"

#define WALKS 10
#define BUDGET 400
#define ROUNDS 5

static const char *const SCHEMA =
    "{\"type\":\"object\",\"properties\":{\"query\":{\"type\":\"string\",\"maxLength\":48},\"limit\":{\"type\":"
    "\"integer\",\"minimum\":0},\"status\":{\"enum\":[\"open\",\"pending\",\"closed\"]},\"note\":{\"type\":"
    "\"string\"}},\"required\":[\"query\",\"limit\",\"status\",\"note\"],\"additionalProperties\":false}";

static const char *const WORST =
    "{\"type\":\"object\",\"properties\":{\"user\":{\"type\":\"object\",\"properties\":{\"email\":{\"type\":"
    "\"string\",\"format\":\"email\"},\"id\":{\"type\":\"string\",\"format\":\"uuid\"},\"role\":{\"enum\":["
    "\"admin\",\"user\"]}},\"required\":[\"email\",\"id\",\"role\"],\"additionalProperties\":false},\"price\":{"
    "\"type\":\"number\",\"exclusiveMinimum\":0},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\","
    "\"pattern\":\"^[a-z]{1,8}$\"},\"minItems\":1},\"when\":{\"type\":\"string\",\"format\":\"date-time\"},"
    "\"pay\":{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"card\"},\"last4\":{"
    "\"type\":\"string\",\"pattern\":\"^\\\\d{4}$\"}},\"required\":[\"kind\",\"last4\"]},{\"type\":\"object\","
    "\"properties\":{\"kind\":{\"const\":\"bank\"},\"iban\":{\"type\":\"string\",\"minLength\":15,"
    "\"maxLength\":34}},\"required\":[\"kind\",\"iban\"]}]},\"tree\":{\"$ref\":\"#/$defs/node\"}},\"required\":["
    "\"user\",\"price\",\"tags\",\"when\",\"pay\",\"tree\"],\"additionalProperties\":false,\"$defs\":{\"node\":{"
    "\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":-5,\"maximum\":5},\"kids\":{"
    "\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"},\"maxItems\":2}},\"required\":[\"n\",\"kids\"],"
    "\"additionalProperties\":false}}}";

/* Any JSON value, with free whitespace: what a client sends when it wants JSON and writes GBNF itself. */
static const char GBNF_JSON[] =
    "root ::= ws value\n"
    "value ::= ( object | array | string | number | \"true\" | \"false\" | \"null\" ) ws\n"
    "object ::= \"{\" ws ( member ( \",\" ws member )* )? \"}\"\n"
    "member ::= string ws \":\" ws value\n"
    "array ::= \"[\" ws ( value ( \",\" ws value )* )? \"]\"\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} ) )* \"\\\"\"\n"
    "number ::= \"-\"? ( \"0\" | [1-9] [0-9]* ) ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )?\n"
    "ws ::= [ \\t\\n]{0,8}\n";

/* A shipping manifest, one record a line: a made-up format of the kind a
 * grammar pins a model's output to (dates, codes, an enum, free text, a total). */
static const char GBNF_RECORDS[] =
    "root ::= header line{1,20} footer\n"
    "header ::= \"MANIFEST \" date \" \" code \"\\n\"\n"
    "line ::= \"- \" sku \" x\" qty \" \" status ( \" # \" note )? \"\\n\"\n"
    "footer ::= \"TOTAL \" qty \"\\n\"\n"
    "date ::= [12] [0-9]{3} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( [0-2] [0-9] | \"3\" [01] )\n"
    "code ::= [A-Z]{3} \"-\" [0-9]{4}\n"
    "sku ::= [A-Z]{2} [0-9]{2,6}\n"
    "qty ::= [1-9] [0-9]{0,4}\n"
    "status ::= \"packed\" | \"shipped\" | \"held\" | \"returned\"\n"
    "note ::= [a-zA-Z ,.]{1,60}\n";

/* Free text a line at a time (a bulleted answer): a character class repeated
 * without bound, where most of the vocabulary stays allowed at every step. */
static const char GBNF_LINES[] = "root ::= item{1,6}\n"
                                 "item ::= \"- \" [^\\n]+ \"\\n\"\n";

typedef struct {
    double mask_us, accept_us, max_us;
    long steps, allowed, taken;
} result;

/* One walk's matcher: a JSON schema's or a GBNF grammar's. */
typedef struct {
    kvt_jg *jg;
    kvt_gbnf_m *gm;
} matcher;

static int32_t m_mask(matcher *m, int32_t budget, uint8_t *mask) {
    return m->jg ? kvt_jg_mask(m->jg, budget, mask) : kvt_gbnf_m_mask(m->gm, budget, mask);
}
static void m_accept(matcher *m, int32_t tok) {
    if (m->jg) kvt_jg_accept(m->jg, tok);
    else kvt_gbnf_m_accept(m->gm, tok);
}
static int m_done(const matcher *m) { return m->jg ? kvt_jg_done(m->jg) : kvt_gbnf_m_done(m->gm); }

/* A workload: a schema (JSON text, NULL for json_object) or a GBNF grammar. */
typedef struct {
    const char *label, *schema, *gbnf;
    int slow; /* GBNF: 1 the mask without its memo of parse sets, 2 without loopsets (free text taken at once) */
} workload;

static result run(const kvt_jg_vocab *v, const workload *wl) {
    cJSON *sc = wl->schema ? cJSON_Parse(wl->schema) : NULL;
    char err[256];
    kvt_jg_schema *s = NULL;
    kvt_gbnf *gb = NULL;
    if (wl->gbnf ? kvt_gbnf_parse(wl->gbnf, strlen(wl->gbnf), &gb, err, sizeof err)
                 : kvt_jg_schema_compile(sc, &s, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", wl->label, err);
        exit(1);
    }
    int32_t nv = kvt_jg_vocab_size(v);
    uint8_t *mask = kvt_xmalloc((size_t)nv);
    int32_t *allowed = kvt_xmalloc((size_t)nv * sizeof *allowed);
    unsigned seed = 7;
    double t_mask = 0, t_accept = 0, t_max = 0;
    result r = {0};
    for (int w = 0; w < WALKS; w++) {
        matcher g = {gb ? NULL : kvt_jg_new(s, v), gb ? kvt_gbnf_m_new(gb, v) : NULL};
        if (g.gm && wl->slow == 1) kvt_gbnf_m_set_memo(g.gm, 0);
        if (g.gm && wl->slow == 2) kvt_gbnf_m_set_loops(g.gm, 0);
        for (int32_t b = BUDGET; b > 0 && !m_done(&g); b--) {
            double t0 = kvt_now();
            int32_t n = m_mask(&g, b, mask);
            double t1 = kvt_now();
            if (!n) break;
            int32_t k = 0;
            for (int32_t id = 0; id < nv; id++)
                if (mask[id]) allowed[k++] = id;
            seed = seed * 1103515245u + 12345u;
            double t2 = kvt_now();
            m_accept(&g, allowed[(seed >> 8) % (unsigned)k]);
            t_accept += kvt_now() - t2;
            t_mask += t1 - t0;
            t_max = t1 - t0 > t_max ? t1 - t0 : t_max;
            r.allowed += n;
            if (g.gm) r.taken += kvt_gbnf_m_loop_taken(g.gm);
            r.steps++;
        }
        if (g.jg) kvt_jg_free(g.jg);
        else kvt_gbnf_m_free(g.gm);
    }
    r.mask_us = 1e6 * t_mask / (double)r.steps;
    r.accept_us = 1e6 * t_accept / (double)r.steps;
    r.max_us = 1e6 * t_max;
    free(mask);
    free(allowed);
    if (s) kvt_jg_schema_free(s);
    kvt_gbnf_free(gb);
    cJSON_Delete(sc);
    return r;
}

static int by_mask(const void *a, const void *b) {
    double x = ((const result *)a)->mask_us, y = ((const result *)b)->mask_us;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "../shared/vocab/ggml-vocab-gpt-2.gguf";
    kvt_gguf *g;
    kvt_tokenizer *t;
    if (kvt_gguf_open(path, &g) || kvt_tokenizer_load(g, &t)) {
        fprintf(stderr, "cannot load %s: %s\n", path, kvt_errmsg());
        return 1;
    }
    double t0 = kvt_now();
    kvt_jg_vocab *v = kvt_jg_vocab_new(t);
    printf("vocabulary %s: %d tokens, tries built in %.1f ms (once per model)\n", path, kvt_jg_vocab_size(v),
           1e3 * (kvt_now() - t0));
    double load[3] = {0};
    if (getloadavg(load, 3) < 0) load[0] = -1;
    printf("load average before: %.2f %.2f %.2f\n", load[0], load[1], load[2]);
    static const workload wls[] = {{"json_object", NULL, NULL, 0},
                                   {"tool schema", SCHEMA, NULL, 0},
                                   {"worst schema", WORST, NULL, 0},
                                   {"gbnf json", NULL, GBNF_JSON, 0},
                                   {"gbnf records", NULL, GBNF_RECORDS, 0},
                                   {"gbnf lines", NULL, GBNF_LINES, 0},
                                   {"gbnf json/noloop", NULL, GBNF_JSON, 2},
                                   {"gbnf records/noloop", NULL, GBNF_RECORDS, 2},
                                   {"gbnf lines/noloop", NULL, GBNF_LINES, 2}};
    enum { N_WL = sizeof wls / sizeof *wls };
    result res[N_WL][ROUNDS];
    for (int round = 0; round < ROUNDS; round++) /* alternated, so load drifts hit each alike */
        for (int k = 0; k < N_WL; k++) res[k][round] = run(v, &wls[k]);
    for (int k = 0; k < N_WL; k++) {
        qsort(res[k], ROUNDS, sizeof res[k][0], by_mask);
        const result *m = &res[k][ROUNDS / 2];
        printf("%-19s %5ld tokens/round: mask %7.1f us/token median of %d rounds (%.1f..%.1f; slowest step %.0f us), "
               "avg %ld allowed of %d (%ld taken at once), accept %.2f us/token\n",
               wls[k].label, m->steps, m->mask_us, ROUNDS, res[k][0].mask_us, res[k][ROUNDS - 1].mask_us, m->max_us,
               m->allowed / m->steps, kvt_jg_vocab_size(v), m->taken / m->steps, m->accept_us);
    }
    if (getloadavg(load, 3) < 0) load[0] = -1;
    printf("load average after: %.2f %.2f %.2f\n", load[0], load[1], load[2]);
    kvt_jg_vocab_free(v);
    kvt_tokenizer_free(t);
    kvt_gguf_close(g);
    return 0;
}
