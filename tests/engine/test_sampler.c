// SPDX-License-Identifier: MIT
/* Sampler tests: greedy is argmax, filters narrow the choice as specified, a
 * seed replays the same tokens, draws follow the softmax probabilities, the
 * steps run in the order given, and llama.cpp's other samplers (typical,
 * XTC, min_keep, dynamic temperature, Mirostat, DRY) keep what they should. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sampler.h"
#include "testutil.h"

#define V 8
#define DRAWS 20000

static const float logits[V] = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 0.5f, 2.5f, 0.0f};

static kvt_sampler *make(float temp, int top_k, float top_p, uint64_t seed) {
    kvt_sampler_params p = {.temp = temp, .top_k = top_k, .top_p = top_p, .seed = seed};
    kvt_sampler *s = kvt_sampler_new(p, V);
    CHECK(s != NULL);
    return s;
}

/* A sampler with the steps of order ("ekpmt" letters, as llama.cpp's samplers string). */
static kvt_sampler *make_order(kvt_sampler_params p, const char *order) {
    p.has_steps = 1;
    for (const char *c = order; *c; c++)
        p.steps[p.n_steps++] = (uint8_t)(*c == 'e'       ? KVT_SAMPLE_PENALTIES
                                             : *c == 'k' ? KVT_SAMPLE_TOP_K
                                             : *c == 'p' ? KVT_SAMPLE_TOP_P
                                             : *c == 'm' ? KVT_SAMPLE_MIN_P
                                             : *c == 'y' ? KVT_SAMPLE_TYPICAL
                                             : *c == 'x' ? KVT_SAMPLE_XTC
                                             : *c == 'd' ? KVT_SAMPLE_DRY
                                                         : KVT_SAMPLE_TEMPERATURE);
    kvt_sampler *s = kvt_sampler_new(p, V);
    CHECK(s != NULL);
    return s;
}

/* Whether every one of n draws is one of the ids in mask (bit i: id i). */
static int draws_within(kvt_sampler *s, int n, unsigned mask) {
    int within = 1;
    for (int i = 0; i < n; i++) within &= (mask >> kvt_sampler_sample(s, logits)) & 1;
    kvt_sampler_free(s);
    return within;
}

/* The penalties' window covers the prompt's last tokens, as llama.cpp's
 * sampler is given the prompt first: 1 (3.0) in the prompt loses 0.6 and 3
 * wins; a window of 2 past it forgets it; a prompt longer than the window
 * keeps its tail; an id past the logits is never counted. */
static void test_prompt_penalties(void) {
    kvt_sampler_params pres = {.temp = 0, .presence_penalty = 0.6f};
    kvt_sampler *s = kvt_sampler_new(pres, V);
    kvt_sampler_prompt(s, (const int32_t[]){1, 99}, 2);
    int32_t a = kvt_sampler_sample(s, logits), b = kvt_sampler_sample(s, logits);
    CHECKF(a == 3 && b == 6, "presence over the prompt: %d %d", a, b);
    kvt_sampler_free(s);
    pres.penalty_last_n = 2;
    s = kvt_sampler_new(pres, V);
    kvt_sampler_prompt(s, (const int32_t[]){1, 0, 0}, 3);
    CHECKF((a = kvt_sampler_sample(s, logits)) == 1, "1 is out of a window of 2: %d", a);
    kvt_sampler_free(s);
    /* 200 prompt tokens (the history's bulk trim) ending in 3, 1: both lose 2, 6 (2.5) wins; then 3, which
     * the window of 2 (1, 6) no longer holds; then 1 */
    int32_t prompt[200];
    for (int i = 0; i < 200; i++) prompt[i] = i % 2 ? 7 : 0;
    prompt[198] = 3, prompt[199] = 1;
    kvt_sampler_params fr = {.temp = 0, .frequency_penalty = 2.0f, .penalty_last_n = 2};
    s = kvt_sampler_new(fr, V);
    kvt_sampler_prompt(s, prompt, 200);
    a = kvt_sampler_sample(s, logits), b = kvt_sampler_sample(s, logits);
    int32_t c = kvt_sampler_sample(s, logits);
    CHECKF(a == 6 && b == 3 && c == 1, "window of 2 over a long prompt: %d %d %d", a, b, c);
    kvt_sampler_free(s);
}

/* llama.cpp's infill step: a vocabulary of 8 pieces, id 3 ending generation. */
static void test_infill(void) {
    static const char bytes[] = "aabbxxyxyzc"; /* a, ab, b, (end), x, xy, xyz, c */
    uint32_t off[9] = {0, 1, 3, 4, 4, 5, 7, 10, 11};
    uint8_t eog[8] = {0, 0, 0, 1, 0, 0, 0, 0};
    kvt_infill_vocab v = {.eog = eog, .off = off, .bytes = (char *)bytes, .n = 8, .eot = 3};
    /* "a" takes "ab" (.55), "xy" takes "xyz" (.20) and then "x" (.30); "c" and "b" are under 0.2; of .87 left,
     * "a" (.63) and "xy" (.345) pass 1/3; the end stays */
    int32_t ids[8] = {0, 1, 5, 4, 7, 6, 2, 3};
    double p[8] = {.30, .25, .15, .10, .09, .05, .04, .02};
    uint8_t keep[8];
    int32_t kept = kvt_infill_keep(&v, ids, p, 8, keep);
    CHECKF(kept == 3 && keep[0] && keep[2] && keep[7] && !keep[1] && !keep[3] && !keep[4] && !keep[5] && !keep[6],
           "infill kept %d: %d%d%d%d%d%d%d%d", kept, keep[0], keep[1], keep[2], keep[3], keep[4], keep[5], keep[6],
           keep[7]);
    CHECKF(fabs(p[0] - .55) < 1e-12 && fabs(p[2] - .30) < 1e-12, "merged %.17g %.17g", p[0], p[2]);
    /* the end at .10 of 8 candidates: 3 x .10 x 8 > .90, only the end stays */
    double q[8] = {.20, .15, .15, .10, .10, .10, .10, .10};
    int32_t ids2[8] = {0, 2, 4, 3, 7, 1, 5, 6};
    kept = kvt_infill_keep(&v, ids2, q, 8, keep);
    CHECKF(kept == 1 && keep[3], "infill with a likely end kept %d", kept);
    /* no text token reaches 0.2 (none begins another): 0, the end-of-turn token alone */
    double r[5] = {.19, .19, .19, .19, .01}; /* the end: 3 x .01 x 5 is not above .76 */
    int32_t ids3[5] = {0, 2, 4, 7, 3};
    CHECK(kvt_infill_keep(&v, ids3, r, 5, keep) == 0);
    /* in an order: "ab" (p .40) takes "a" (.36), "xy" (.22) takes "xyz" and "x" but stays under 1/3 of what
     * passes 0.2, so "ab" and the end (p 4e-5) are left; greedy takes "ab" */
    static const float lg[8] = {1.0f, 1.1f, -3.0f, -9.0f, -3.0f, 0.5f, -3.0f, -3.0f};
    kvt_sampler_params ip = {.temp = 0, .infill = &v, .has_steps = 1, .n_steps = 1, .steps = {KVT_SAMPLE_INFILL}};
    kvt_sampler *s = kvt_sampler_new(ip, 8);
    int32_t got = kvt_sampler_sample(s, lg);
    CHECKF(got == 1, "greedy over what infill keeps: %d", got);
    kvt_sampler_free(s);
    ip.temp = 1.0f;
    ip.seed = 4;
    s = kvt_sampler_new(ip, 8);
    int only = 1;
    for (int i = 0; i < 200; i++) {
        int32_t t = kvt_sampler_sample(s, lg);
        only &= t == 1 || t == 3;
    }
    kvt_sampler_free(s);
    CHECK(only);
}

/* The order of the steps (llama.cpp's samplers): kvtier's own order given
 * explicitly draws exactly what the default draws; each step works on what
 * the steps before it left; a step left out is not applied; greedy stays
 * greedy; a seed replays the same draws. */
static void test_order(void) {
    kvt_sampler_params all = {.temp = 0.7f,
                              .top_k = 5,
                              .top_p = 0.9f,
                              .min_p = 0.05f,
                              .seed = 9,
                              .presence_penalty = 0.3f,
                              .repeat_penalty = 1.3f,
                              .penalty_last_n = 4};
    kvt_sampler *a = kvt_sampler_new(all, V), *b = make_order(all, "ekmtp");
    int same = 1;
    for (int i = 0; i < 500; i++) same &= kvt_sampler_sample(a, logits) == kvt_sampler_sample(b, logits);
    CHECKF(same, "kvtier's order given explicitly draws what the default draws");
    kvt_sampler_free(a);
    kvt_sampler_free(b);

    const unsigned TOP2 = 1u << 1 | 1u << 3, TOP3 = TOP2 | 1u << 6;
    /* top_p 0.6 at temperature 1 keeps ids 1 and 3 (0.307 each); after a temperature of 10 the
     * distribution is nearly flat and it keeps five */
    kvt_sampler_params hot = {.temp = 10.0f, .top_p = 0.6f, .seed = 3};
    CHECKF(draws_within(make_order(hot, "pt"), 300, TOP2), "top_p before temperature keeps 1 and 3");
    CHECKF(!draws_within(make_order(hot, "tp"), 300, TOP2), "top_p after temperature keeps more");
    CHECKF(!draws_within(kvt_sampler_new(hot, V), 300, TOP2), "... as kvtier's own order does");
    /* min_p 0.5: logits within ln 2 of the top (1, 3, 6) at temperature 1, all after one of 10 */
    kvt_sampler_params mp = {.temp = 10.0f, .top_p = 1.0f, .min_p = 0.5f, .seed = 4};
    CHECKF(draws_within(make_order(mp, "mt"), 300, TOP3), "min_p before temperature keeps 1, 3 and 6");
    CHECKF(!draws_within(make_order(mp, "tm"), 300, TOP3), "min_p after temperature keeps more");
    /* a step left out is not applied: top_k 1 without k, or an empty order, draws at temperature 1 */
    kvt_sampler_params k1 = {.temp = 0.5f, .top_k = 1, .top_p = 1.0f, .seed = 5};
    CHECKF(draws_within(make_order(k1, "kt"), 200, 1u << 1), "top_k 1 listed: only the best");
    CHECKF(!draws_within(make_order(k1, "t"), 200, 1u << 1), "top_k 1 left out: not applied");
    CHECKF(!draws_within(make_order(k1, ""), 200, 1u << 1), "an empty order: no filter at all");
    /* penalties where they stand: after top_k 2 they reorder only ids 1 and 3; before it they push
     * a repeated token out of the top two */
    kvt_sampler_params fq = {.temp = 1.0f, .top_k = 2, .top_p = 1.0f, .frequency_penalty = 2.0f, .seed = 6};
    CHECKF(draws_within(make_order(fq, "ket"), 200, TOP2), "penalties after top_k: still 1 or 3");
    CHECKF(!draws_within(make_order(fq, "ekt"), 200, TOP2), "penalties before top_k: others come in");

    /* greedy stays greedy in any order; the penalties apply where the order lists them */
    kvt_sampler_params g = {.temp = 0, .top_k = 3, .top_p = 0.5f, .presence_penalty = 0.6f};
    int32_t got[4];
    kvt_sampler *s = make_order(g, "ptmk");
    for (int i = 0; i < 4; i++) got[i] = kvt_sampler_sample(s, logits);
    CHECKF(got[0] == 1 && got[1] == 1 && got[2] == 1 && got[3] == 1, "greedy without penalties %d %d %d %d", got[0],
           got[1], got[2], got[3]);
    kvt_sampler_free(s);
    s = make_order(g, "tpe");
    for (int i = 0; i < 4; i++) got[i] = kvt_sampler_sample(s, logits);
    CHECKF(got[0] == 1 && got[1] == 3 && got[2] == 6 && got[3] == 1, "greedy with penalties %d %d %d %d", got[0],
           got[1], got[2], got[3]);
    kvt_sampler_free(s);

    /* a seed replays the same draws under an order; another seed differs */
    kvt_sampler_params sd = {.temp = 1.5f, .top_k = 6, .top_p = 0.95f, .min_p = 0.01f, .seed = 77};
    kvt_sampler_params sd2 = sd;
    sd2.seed = 78;
    kvt_sampler *x = make_order(sd, "kpmt"), *y = make_order(sd, "kpmt"), *z = make_order(sd2, "kpmt");
    int same_xy = 1, same_xz = 1;
    for (int i = 0; i < 200; i++) {
        int tx = kvt_sampler_sample(x, logits);
        same_xy &= tx == kvt_sampler_sample(y, logits);
        same_xz &= tx == kvt_sampler_sample(z, logits);
    }
    CHECK(same_xy && !same_xz);
    kvt_sampler_free(x);
    kvt_sampler_free(y);
    kvt_sampler_free(z);
}

/* Top-k picks its candidates before sorting them (not the whole vocabulary):
 * the draws must be those of a full sort. min_p with a floor far below every
 * finite logit keeps them all but ranks the whole vocabulary first, so "mkt"
 * sorts everything and "kmt" only the top k; both must draw the same, over a
 * large vocabulary with ties and tokens at -inf, for k from 1 past the
 * vocabulary's size. */
static void test_top_k_select(void) {
    enum { NV = 5003 };
    static float big[NV];
    uint32_t st = 12345;
    for (int i = 0; i < NV; i++) {
        st = st * 1664525u + 1013904223u;
        big[i] = (float)((int)(st >> 24) % 33 - 16) * 0.5f; /* -8 .. 8 in steps of 0.5: many ties */
        if (st % 97 == 0) big[i] = -INFINITY;               /* refused by a grammar */
    }
    const int32_t ks[] = {1, 2, 3, 40, 41, 1000, NV - 1, NV, NV + 7};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        kvt_sampler_params p = {.temp = 0.9f, .top_k = ks[i], .top_p = 1.0f, .min_p = 1e-30f, .seed = 5 + i};
        p.has_steps = 1;
        p.n_steps = 3;
        p.steps[0] = KVT_SAMPLE_MIN_P, p.steps[1] = KVT_SAMPLE_TOP_K, p.steps[2] = KVT_SAMPLE_TEMPERATURE;
        kvt_sampler *full = kvt_sampler_new(p, NV);
        p.steps[0] = KVT_SAMPLE_TOP_K, p.steps[1] = KVT_SAMPLE_MIN_P;
        kvt_sampler *sel = kvt_sampler_new(p, NV);
        int same = 1, finite = 1;
        for (int d = 0; d < 300; d++) {
            int32_t t = kvt_sampler_sample(full, big);
            same &= t == kvt_sampler_sample(sel, big);
            finite &= !isinf(big[t]);
        }
        CHECKF(same && finite, "top_k %d: draws of the picked top k equal a full sort's (%d), all finite (%d)",
               (int)ks[i], same, finite);
        kvt_sampler_free(full);
        kvt_sampler_free(sel);
    }
}

/* The ids drawn in n draws (bit i: id i). */
static unsigned drawn(kvt_sampler *s, int n) {
    unsigned seen = 0;
    for (int i = 0; i < n; i++) seen |= 1u << kvt_sampler_sample(s, logits);
    kvt_sampler_free(s);
    return seen;
}

/* At temperature 1 the logits' probabilities are, by id: .042 .307 .113 .307
 * .006 .025 .186 .015, entropy 1.602 nats. Ordered by |-ln p - 1.602|: 6
 * (.08), 1 and 3 (.42), 2 (.58), 0, 5, 7, 4; their running sums .186, .493,
 * .800, .912, ... */
static void test_typical_xtc(void) {
    const unsigned ID1 = 1u << 1, ID3 = 1u << 3, ID6 = 1u << 6, ID2 = 1u << 2;
    kvt_sampler_params t = {.temp = 1.0f, .top_p = 1.0f, .typical_p = 0.15f, .seed = 21};
    CHECKF(drawn(kvt_sampler_new(t, V), 300) == ID6, "typical 0.15 keeps the most typical token alone, not the best");
    t.typical_p = 0.45f;
    CHECKF(drawn(kvt_sampler_new(t, V), 400) == (ID6 | ID1), "typical 0.45 keeps 6 and 1 (1 before 3 on a tie)");
    t.typical_p = 0.15f, t.min_keep = 3;
    CHECKF(drawn(kvt_sampler_new(t, V), 400) == (ID6 | ID1 | ID3), "typical with min_keep 3 keeps 6, 1 and 3");
    t.min_keep = 0, t.temp = 0;
    CHECKF(drawn(kvt_sampler_new(t, V), 50) == ID6, "temperature 0 after typical takes the best it left (llama.cpp)");
    CHECKF(drawn(make_order(t, "ty"), 50) == ID1, "temperature 0 before typical leaves it one token");

    /* XTC at threshold 0.15: 1, 3 and 6 reach it, so 1 and 3 go and 6 stays, the least likely of them */
    kvt_sampler_params x = {.temp = 1.0f, .top_p = 1.0f, .xtc_probability = 1.0f, .xtc_threshold = 0.15f, .seed = 22};
    unsigned got = drawn(kvt_sampler_new(x, V), 2000);
    CHECKF(!(got & (ID1 | ID3)) && (got & ID6) && (got & ID2), "XTC drops 1 and 3, keeps 6 and the rest: %#x", got);
    x.temp = 0;
    CHECKF(drawn(kvt_sampler_new(x, V), 50) == ID6, "temperature 0 after XTC takes 6");
    x.temp = 1.0f, x.min_keep = 7;
    CHECKF(drawn(kvt_sampler_new(x, V), 2000) & ID1, "XTC that would leave 6 of min_keep 7 does nothing");
    x.min_keep = 0, x.xtc_threshold = 0.35f;
    CHECKF(drawn(kvt_sampler_new(x, V), 2000) & ID1, "XTC with no two tokens over the threshold does nothing");
    x.xtc_threshold = 0.15f, x.xtc_probability = 0.5f;
    kvt_sampler *half = kvt_sampler_new(x, V);
    int top = 0;
    for (int i = 0; i < 4000; i++) {
        int32_t id = kvt_sampler_sample(half, logits);
        top += id == 1 || id == 3;
    }
    kvt_sampler_free(half);
    /* 1 or 3 is drawn only on the half of tokens XTC skips: .614 / 2 of them, 4 sigma = .03 */
    CHECKF(fabs(top / 4000.0 - 0.307) < 0.03, "XTC at 0.5 halves 1 and 3's share: %.3f", top / 4000.0);

    /* min_keep on top_p and min_p */
    kvt_sampler_params k = {.temp = 1.0f, .top_p = 0.1f, .min_keep = 3, .seed = 23};
    CHECKF(drawn(kvt_sampler_new(k, V), 400) == (ID1 | ID3 | ID6), "top_p 0.1 with min_keep 3 keeps three");
    k.top_p = 1.0f, k.min_p = 0.9f, k.min_keep = 4;
    CHECKF(drawn(kvt_sampler_new(k, V), 600) == (ID1 | ID3 | ID6 | ID2), "min_p 0.9 with min_keep 4 keeps four");

    /* their neutral values (and XTC's threshold, typical's min_keep without them) draw exactly what none does */
    kvt_sampler_params plain = {.temp = 0.9f, .top_k = 6, .top_p = 0.95f, .min_p = 0.02f, .seed = 24};
    kvt_sampler_params idle = plain;
    idle.typical_p = 1.0f, idle.xtc_threshold = 0.1f, idle.dynatemp_exponent = 1.0f, idle.mirostat_tau = 5.0f,
    idle.mirostat_eta = 0.1f, idle.min_keep = 1, idle.dry_base = 1.75f, idle.dry_allowed_length = 2,
    idle.dry_penalty_last_n = -1;
    kvt_sampler *a = kvt_sampler_new(plain, V), *b = kvt_sampler_new(idle, V);
    int same = 1;
    for (int i = 0; i < 500; i++) same &= kvt_sampler_sample(a, logits) == kvt_sampler_sample(b, logits);
    CHECKF(same, "typical, XTC, dynamic temperature and Mirostat off draw what none draws");
    kvt_sampler_free(a);
    kvt_sampler_free(b);
}

/* Dynamic temperature and Mirostat. */
static void test_dynatemp_mirostat(void) {
    const unsigned ID1 = 1u << 1, ID3 = 1u << 3;
    /* at temperature 0 a dynamic range samples (normalized entropy .77: temperature .77), as llama.cpp does */
    kvt_sampler_params d = {.temp = 0, .top_p = 1.0f, .dynatemp_range = 1.0f, .dynatemp_exponent = 1.0f, .seed = 31};
    CHECKF(drawn(kvt_sampler_new(d, V), 500) & ~(ID1 | ID3), "dynatemp at temp 0, range 1 samples past the best");
    d.dynatemp_exponent = 400.0f; /* .77^400 ~ 0: a temperature near 0, the two tokens at 3.0 */
    CHECKF(drawn(kvt_sampler_new(d, V), 500) == (ID1 | ID3), "a huge exponent leaves the two best");
    /* temperature 1 +- 0.5 at exponent 1: 1.27, hotter than 1: the least likely token's share grows */
    d.temp = 1.0f, d.dynatemp_range = 0.5f, d.dynatemp_exponent = 1.0f;
    kvt_sampler *s = kvt_sampler_new(d, V);
    int low = 0;
    for (int i = 0; i < DRAWS; i++) low += kvt_sampler_sample(s, logits) == 4;
    kvt_sampler_free(s);
    double z = 0, t = 0.5 + 1.0 * 0.7703288540868122;
    for (int i = 0; i < V; i++) z += exp(logits[i] / t);
    double p4 = exp(logits[4] / t) / z, sd = sqrt(p4 * (1 - p4) / DRAWS);
    CHECKF(fabs((double)low / DRAWS - p4) <= 4 * sd, "dynatemp: id 4 at %.4f, expected %.4f (temperature %.3f)",
           (double)low / DRAWS, p4, t);

    /* Mirostat: a tiny target surprise keeps the best token alone (1, first of the tie; its surprise in
     * a set of one is 0, below tau, so mu grows by eta * tau a token: past 1.7 bits after 150), a large one
     * keeps every token; top_k does not apply (Mirostat replaces it); a seed replays the draws */
    for (int v = 1; v <= 2; v++) {
        kvt_sampler_params m =
            {.temp = 1.0f, .top_k = 1, .mirostat = v, .mirostat_tau = 0.1f, .mirostat_eta = 0.1f, .seed = 32};
        CHECKF(drawn(kvt_sampler_new(m, V), 100) == ID1, "mirostat %d, tau 0.1: the best token", v);
        m.mirostat_tau = 10.0f;
        unsigned wide = drawn(kvt_sampler_new(m, V), 3000);
        CHECKF((wide & 0x6f) == 0x6f, "mirostat %d, tau 10: ids drawn %#x", v, wide);
        kvt_sampler *a = kvt_sampler_new(m, V), *b = kvt_sampler_new(m, V);
        int same = 1;
        for (int i = 0; i < 300; i++) same &= kvt_sampler_sample(a, logits) == kvt_sampler_sample(b, logits);
        CHECKF(same, "mirostat %d replays its seed", v);
        kvt_sampler_free(a);
        kvt_sampler_free(b);
        m.temp = 0;
        CHECKF(drawn(kvt_sampler_new(m, V), 50) == ID1, "mirostat %d at temperature 0 is greedy", v);
    }
    /* version 2 with tau 1.7 bits: mu starts at 3.4, keeping 1, 3, 6 (1.70, 1.70, 2.43 bits) and 2 (3.15);
     * a draw of 2 or 6 is above tau and lowers mu, so the set narrows and the best tokens' share grows */
    kvt_sampler_params m2 = {.temp = 1.0f, .mirostat = 2, .mirostat_tau = 1.7f, .mirostat_eta = 0.5f, .seed = 33};
    s = kvt_sampler_new(m2, V);
    int best = 0, other = 0;
    for (int i = 0; i < 2000; i++) {
        int32_t id = kvt_sampler_sample(s, logits);
        best += id == 1 || id == 3;
        other += !(id == 1 || id == 3 || id == 6 || id == 2);
    }
    kvt_sampler_free(s);
    CHECKF(other == 0 && best > 1400, "mirostat 2 keeps its surprise near tau: %d of 2000 best, %d outside", best,
           other);
}

/* A sampler with DRY over the history prompt[0..n). */
static kvt_sampler *dry_sampler(kvt_sampler_params p, const int32_t *prompt, int32_t n) {
    kvt_sampler *s = kvt_sampler_new(p, V);
    kvt_sampler_prompt(s, prompt, n);
    return s;
}

/* DRY: the history 1 2 3 4 1 2 3 ends with a repeat of 1 2 3, which 4
 * would extend to 4 tokens long: 4 loses multiplier * base^(3 - allowed). */
static void test_dry(void) {
    static const float top4[V] = {0, 0, 0, 0, 5.0f, 0, 0, 0};
    const int32_t hist[] = {1, 2, 3, 4, 1, 2, 3};
    kvt_sampler_params d = {.temp = 0,
                            .dry_multiplier = 1.0f,
                            .dry_base = 2.0f,
                            .dry_allowed_length = 2,
                            .dry_penalty_last_n = -1};
    kvt_sampler *s = dry_sampler(d, hist, 7);
    CHECKF(kvt_sampler_sample(s, top4) == 4, "a penalty of 2 leaves 4 on top (5 - 2 > 0)");
    kvt_sampler_free(s);
    d.dry_multiplier = 3.0f; /* 6: below the others, 0 wins on the tie */
    s = dry_sampler(d, hist, 7);
    CHECKF(kvt_sampler_sample(s, top4) == 0, "a penalty of 6 drops 4 below the rest");
    /* the history is now 1 2 3 4 1 2 3 0: no repeat of the end, 4 is free again */
    CHECKF(kvt_sampler_sample(s, top4) == 4, "once the repeat is broken, 4 is free");
    kvt_sampler_free(s);
    d.dry_allowed_length = 4;
    s = dry_sampler(d, hist, 7);
    CHECKF(kvt_sampler_sample(s, top4) == 4, "a repeat of 3 within an allowed length of 4 is free");
    kvt_sampler_free(s);
    d.dry_allowed_length = 2, d.dry_penalty_last_n = 3;
    s = dry_sampler(d, hist, 7);
    CHECKF(kvt_sampler_sample(s, top4) == 4, "a window of 3 tokens holds no earlier 1 2 3");
    kvt_sampler_free(s);
    d.dry_penalty_last_n = 5; /* 3 4 1 2 3: the end's 3 repeats, its follower 4 extends a repeat of 1 */
    s = dry_sampler(d, hist, 7);
    CHECKF(kvt_sampler_sample(s, top4) == 4, "a window of 5 sees a repeat of 1 only, within the allowed 2");
    kvt_sampler_free(s);
    d.dry_penalty_last_n = -1;
    uint8_t brk[V] = {0};
    brk[2] = 1; /* a breaker at 2: the end's repeat is the 3 after it alone */
    d.dry_breaker = brk;
    s = dry_sampler(d, hist, 7);
    CHECKF(kvt_sampler_sample(s, top4) == 4, "a repeat stops at a breaker");
    kvt_sampler_free(s);
    brk[2] = 0, brk[4] = 1; /* a breaker itself is never penalized */
    s = dry_sampler(d, hist, 7);
    CHECKF(kvt_sampler_sample(s, top4) == 4, "a breaker token is never penalized");
    kvt_sampler_free(s);
    d.dry_breaker = NULL;
    /* sampled: 4 would be drawn ~95% of the time; DRY's penalty of 6 (or in an order without d: none) */
    d.temp = 1.0f, d.top_p = 1.0f, d.seed = 41;
    unsigned with_d = 0;
    for (int i = 0; i < 20; i++) {
        d.seed = 41 + (uint64_t)i;
        kvt_sampler *o = dry_sampler(d, hist, 7);
        with_d |= 1u << kvt_sampler_sample(o, top4);
        kvt_sampler_free(o);
    }
    CHECKF(!(with_d & 1u << 4), "DRY's penalty of 6: twenty seeds' first tokens are never 4 (%#x)", with_d);
    unsigned no_d = 0;
    for (int i = 0; i < 20; i++) {
        kvt_sampler *o = make_order(d, "t");
        kvt_sampler_prompt(o, hist, 7);
        no_d |= 1u << kvt_sampler_sample(o, top4);
        kvt_sampler_free(o);
    }
    CHECKF(no_d & 1u << 4, "an order without dry does not apply it");
    /* prompt ids past the logits (a tokenizer larger than the output) take part in no penalty */
    const int32_t wide[] = {1, 99, 4, 3, 99, 4, 3, -5};
    kvt_sampler_params zz = {.temp = 0,
                             .dry_multiplier = 6.0f,
                             .dry_base = 1.75f,
                             .dry_allowed_length = 2,
                             .dry_penalty_last_n = -1};
    s = dry_sampler(zz, wide, 8);
    CHECKF(kvt_sampler_sample(s, top4) == 0, "ids past the vocabulary match each other: 4 extends a repeat of 4");
    CHECKF(kvt_sampler_sample(s, top4) == 4, "... and 0, returned, ends the repeat");
    kvt_sampler_free(s);
    /* allowed length 0: every token that followed anything in the window loses the multiplier */
    kvt_sampler_params z = {.temp = 0, .dry_multiplier = 6.0f, .dry_base = 1.75f, .dry_penalty_last_n = -1};
    const int32_t seen[] = {5, 4, 6};
    s = dry_sampler(z, seen, 3);
    CHECKF(kvt_sampler_sample(s, top4) == 0, "allowed length 0 penalizes 4, which followed 5");
    kvt_sampler_free(s);
}

static const double *rank_ref_logits;
static int rank_ref_cmp(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    double lx = rank_ref_logits[x], ly = rank_ref_logits[y];
    if (lx != ly) return lx > ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* The ranking of large vocabularies (a radix sort) is the one a comparison
 * sort gives: by logit, ties to the lower id, -0 equal to +0, -inf last, on
 * vocabularies above and below its threshold, with few and many ties. */
static void test_rank(void) {
    const int32_t sizes[] = {7, 4095, 4096, 70000, 151936};
    uint32_t x = 12345;
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        for (int kind = 0; kind < 3; kind++) {
            int32_t n = sizes[si];
            double *l = malloc((size_t)n * sizeof *l);
            int32_t *got = malloc((size_t)n * sizeof *got), *want = malloc((size_t)n * sizeof *want);
            for (int32_t i = 0; i < n; i++) {
                x = x * 1664525u + 1013904223u;
                int v = (int)(x >> 8) % (kind == 0 ? 2000000 : kind == 1 ? 40 : 7); /* spread, ties, few values */
                l[i] = (v - (kind == 0 ? 1000000 : kind == 1 ? 20 : 3)) / (kind == 0 ? 77777.0 : 3.0);
                if (kind == 2 && v == 0) l[i] = -INFINITY;
                if (kind == 2 && v == 1) l[i] = (x >> 4) & 1 ? 0.0 : -0.0;
                if (kind == 1 && v == 39) l[i] = 1e300 * (double)((x >> 3) & 7); /* large values, and 0 */
                want[i] = i;
            }
            rank_ref_logits = l;
            qsort(want, (size_t)n, sizeof *want, rank_ref_cmp);
            kvt_sampler_rank(l, n, got);
            CHECKF(!memcmp(got, want, (size_t)n * sizeof *got), "ranking %d logits of kind %d as a comparison sort", n,
                   kind);
            free(l);
            free(got);
            free(want);
        }
    }
}

int main(void) {
    CHECK(kvt_argmax(logits, V) == 1); /* tie between 1 and 3 goes to the lower id */
    CHECK(kvt_sampler_new(kvt_sampler_default_params(), 0) == NULL);

    kvt_sampler *s = make(0.0f, 0, 1.0f, 1);
    for (int i = 0; i < 10; i++) CHECK(kvt_sampler_sample(s, logits) == 1);
    kvt_sampler_free(s);

    /* top-k 1 and a tiny top-p leave only the best candidate */
    s = make(1.0f, 1, 1.0f, 2);
    for (int i = 0; i < 50; i++) CHECK(kvt_sampler_sample(s, logits) == 1);
    kvt_sampler_free(s);
    s = make(1.0f, 0, 1e-6f, 3);
    for (int i = 0; i < 50; i++) CHECK(kvt_sampler_sample(s, logits) == 1);
    kvt_sampler_free(s);

    /* top-k 3 keeps ids 1, 3, 6 (logits 3, 3, 2.5) */
    s = make(1.0f, 3, 1.0f, 4);
    for (int i = 0; i < 500; i++) {
        int t = kvt_sampler_sample(s, logits);
        CHECKF(t == 1 || t == 3 || t == 6, "top-k 3 drew %d", t);
    }
    kvt_sampler_free(s);

    /* same seed, same tokens; another seed differs somewhere */
    kvt_sampler *a = make(1.0f, 0, 1.0f, 42), *b = make(1.0f, 0, 1.0f, 42), *c = make(1.0f, 0, 1.0f, 43);
    int same_ab = 1, same_ac = 1;
    for (int i = 0; i < 200; i++) {
        int ta = kvt_sampler_sample(a, logits), tb = kvt_sampler_sample(b, logits), tc = kvt_sampler_sample(c, logits);
        same_ab &= ta == tb;
        same_ac &= ta == tc;
    }
    CHECK(same_ab);
    CHECK(!same_ac);
    kvt_sampler_free(a);
    kvt_sampler_free(b);
    kvt_sampler_free(c);

    /* frequencies at temperature 1 follow softmax(logits) within 4 sigma */
    s = make(1.0f, 0, 1.0f, 7);
    int count[V] = {0};
    for (int i = 0; i < DRAWS; i++) count[kvt_sampler_sample(s, logits)]++;
    double z = 0;
    for (int i = 0; i < V; i++) z += exp(logits[i]);
    for (int i = 0; i < V; i++) {
        double p = exp(logits[i]) / z, sd = sqrt(p * (1 - p) / DRAWS);
        CHECKF(fabs((double)count[i] / DRAWS - p) <= 4 * sd + 1e-9, "id %d: %.4f vs %.4f", i, (double)count[i] / DRAWS,
               p);
    }
    kvt_sampler_free(s);

    /* bias and penalties: at their neutral values the draws are exactly those without them */
    kvt_sampler_params np = {.temp = 1.0f, .top_p = 1.0f, .seed = 11, .repeat_penalty = 1.0f};
    kvt_sampler_params pp = np;
    pp.repeat_penalty = 0;
    float zero_bias = 0;
    int32_t bias_id = 1;
    np.bias_id = &bias_id;
    np.bias = &zero_bias;
    np.n_bias = 1;
    kvt_sampler *sa = kvt_sampler_new(np, V), *sb = kvt_sampler_new(pp, V);
    int same_neutral = 1;
    for (int i = 0; i < 500; i++) same_neutral &= kvt_sampler_sample(sa, logits) == kvt_sampler_sample(sb, logits);
    CHECK(same_neutral);
    kvt_sampler_free(sa);
    kvt_sampler_free(sb);
    /* logit_bias: -100 bans the argmax; the tie at 3.0 then goes to id 3 */
    kvt_sampler_params bp = {.temp = 0, .bias_id = &bias_id, .bias = (float[]){-100.0f}, .n_bias = 1};
    sa = kvt_sampler_new(bp, V);
    CHECK(kvt_sampler_sample(sa, logits) == 3);
    kvt_sampler_free(sa);
    /* presence: each returned token loses 0.6 once: 1 (3.0), then 3 (3.0), then 6 (2.5 beats 2.4) */
    kvt_sampler_params pres = {.temp = 0, .presence_penalty = 0.6f};
    sa = kvt_sampler_new(pres, V);
    int32_t got[4];
    for (int i = 0; i < 4; i++) got[i] = kvt_sampler_sample(sa, logits);
    CHECKF(got[0] == 1 && got[1] == 3 && got[2] == 6 && got[3] == 1, "presence %d %d %d %d", got[0], got[1], got[2],
           got[3]);
    kvt_sampler_free(sa);
    /* frequency: 1 falls by 2 per use (3, 1, -1, ...); repeat: a positive logit is divided */
    kvt_sampler_params fr = {.temp = 0, .frequency_penalty = 2.0f};
    sa = kvt_sampler_new(fr, V);
    for (int i = 0; i < 4; i++) got[i] = kvt_sampler_sample(sa, logits);
    CHECKF(got[0] == 1 && got[1] == 3 && got[2] == 6 && got[3] == 2, "frequency %d %d %d %d", got[0], got[1], got[2],
           got[3]);
    kvt_sampler_free(sa);
    kvt_sampler_params rp = {.temp = 0, .repeat_penalty = 2.0f, .penalty_last_n = 1};
    sa = kvt_sampler_new(rp, V);
    for (int i = 0; i < 3; i++) got[i] = kvt_sampler_sample(sa, logits);
    /* the window of 1 forgets 1 as soon as 3 is returned, so 1 comes back */
    CHECKF(got[0] == 1 && got[1] == 3 && got[2] == 1, "repeat %d %d %d", got[0], got[1], got[2]);
    kvt_sampler_free(sa);
    /* vLLM's repetition_penalty covers the prompt too: 1 (3.0), in the prompt, falls to 1.5 and 3 wins;
     * then 3 is seen too and 6 (2.5) wins, then 2 (2.0) */
    kvt_sampler_params vr = {.temp = 0, .repetition_penalty = 2.0f};
    sa = kvt_sampler_new(vr, V);
    kvt_sampler_prompt(sa, (const int32_t[]){1, 1, 99}, 3);
    for (int i = 0; i < 3; i++) got[i] = kvt_sampler_sample(sa, logits);
    CHECKF(got[0] == 3 && got[1] == 6 && got[2] == 2, "repetition %d %d %d", got[0], got[1], got[2]);
    kvt_sampler_free(sa);
    /* sampled, with top_k 1 after it: every id but 5 (0.5) in the prompt, positive logits divided by 100 */
    vr.temp = 1.0f, vr.top_k = 1, vr.repetition_penalty = 100.0f, vr.seed = 8;
    sa = kvt_sampler_new(vr, V);
    kvt_sampler_prompt(sa, (const int32_t[]){0, 1, 2, 3, 4, 6, 7}, 7);
    CHECKF(draws_within(sa, 1, 1u << 5), "repetition_penalty in the order's penalties step: 5 on top");
    /* min_p 0.99 at temperature 1 keeps only the two tokens at 3.0 */
    kvt_sampler_params mp = {.temp = 1.0f, .top_p = 1.0f, .min_p = 0.99f, .seed = 5};
    sa = kvt_sampler_new(mp, V);
    int only_top = 1;
    for (int i = 0; i < 200; i++) {
        int32_t t = kvt_sampler_sample(sa, logits);
        only_top &= t == 1 || t == 3;
    }
    CHECK(only_top);
    kvt_sampler_free(sa);

    test_prompt_penalties();
    test_infill();
    test_order();
    test_top_k_select();
    test_typical_xtc();
    test_dynatemp_mirostat();
    test_dry();
    test_rank();

    /* logprobs: the log-softmax of the same logits, top list most likely first, ties to the lower id */
    double lp, top_lp[3];
    int32_t top_id[3];
    kvt_logprobs(logits, V, 2, 3, &lp, top_id, top_lp);
    CHECKF(fabs(lp - (logits[2] - log(z))) < 1e-12, "logprob %.17g", lp);
    CHECK(top_id[0] == 1 && top_id[1] == 3 && fabs(top_lp[0] - (logits[1] - log(z))) < 1e-12);
    for (int i = 0; i < V; i++) CHECK(i == 1 || i == 3 || logits[i] <= logits[top_id[2]]);
    double total = 0;
    for (int i = 0; i < V; i++) {
        kvt_logprobs(logits, V, i, 0, &lp, top_id, top_lp);
        total += exp(lp);
    }
    CHECKF(fabs(total - 1) < 1e-12, "probabilities add up to %.17g", total);
    return kvt_test_done("test_sampler");
}
