// SPDX-License-Identifier: MIT
/* Samplers (see sampler.h). Candidates are ordered by logit then id, so the
 * outcome never depends on sort stability or on how ties were stored. */
#include "sampler.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* PCG32 (O'Neill): 64-bit LCG state, xorshift-rotate output. */
#define PCG_MULT 6364136223846793005ull
#define PCG_INC 1442695040888963407ull
/* 24 random bits make a uniform float in [0, 1) with every value exact. */
#define UNIFORM_BITS 24

/* A candidate token and its logit as the steps so far left it, in double so
 * that a temperature divides it exactly as the softmax reads it. */
typedef struct {
    double l;
    int32_t id;
} cand;

struct kvt_sampler {
    kvt_sampler_params p; /* bias_id and bias point at the copies below */
    int32_t n_vocab;
    uint64_t state;
    cand *c;          /* (n_vocab) candidates */
    float *prob;      /* (n_vocab) candidate probabilities */
    int32_t *bias_id; /* (n_bias) owned copies of the params' logit bias */
    float *bias;
    int penalize;      /* a penalty is on and the order applies it: keep the history */
    int repeat;        /* repetition_penalty is on and the order applies it */
    uint8_t *seen;     /* (n_vocab) tokens of the prompt and the history, for repetition_penalty */
    int32_t *seen_ids; /* (n_seen) those tokens, each once */
    int32_t n_seen;
    int32_t *hist; /* (n_hist of cap_hist) tokens returned so far */
    int32_t n_hist, cap_hist;
    int32_t *count;    /* (n_vocab) occurrences in the penalty window, zero between calls */
    float *work;       /* (n_vocab) the logits after bias and penalties, when any is on */
    cand *aux;         /* (n_vocab) typical's candidates ordered by their distance to the entropy */
    cand *tmp;         /* (n_vocab) the radix sort's second buffer, made on the first large sort */
    int dry;           /* DRY is on and the order applies it: keep its history */
    uint8_t *breaker;  /* (n_vocab) DRY's sequence breakers, or NULL */
    int32_t *dry_hist; /* (n_dry of cap_dry) the prompt's last tokens and those returned */
    int32_t n_dry, cap_dry;
    int32_t *dry_z;   /* (cap_dry) the history's repeats of its own end, by distance */
    int32_t *dry_len; /* (n_vocab) the longest repeat a token would extend, zero between calls */
    double mu;        /* Mirostat's running bound on surprise, in bits */
    int infill;       /* the order has the infill step and params.infill is given */
    double *ip;       /* (n_vocab) the infill step's probabilities */
    uint8_t *ikeep;   /* (n_vocab) and what it keeps */
    int32_t *iids;    /* (n_vocab) the candidates' ids for it */
};

/* kvtier's own order, the one it always had: penalties on the whole
 * vocabulary, top-k, min-p at temperature 1, temperature, top-p; DRY,
 * typical and XTC where llama.cpp's order has them relative to those (off,
 * they change nothing and draw nothing). */
static const uint8_t DEFAULT_STEPS[] = {KVT_SAMPLE_PENALTIES,   KVT_SAMPLE_DRY,   KVT_SAMPLE_TOP_K,
                                        KVT_SAMPLE_TYPICAL,     KVT_SAMPLE_MIN_P, KVT_SAMPLE_XTC,
                                        KVT_SAMPLE_TEMPERATURE, KVT_SAMPLE_TOP_P};

static const uint8_t *steps_of(const kvt_sampler_params *p, int32_t *n) {
    if (!p->has_steps) {
        *n = (int32_t)KVT_ARRAY_LEN(DEFAULT_STEPS);
        return DEFAULT_STEPS;
    }
    *n = KVT_MAX(0, KVT_MIN(p->n_steps, KVT_SAMPLER_MAX_STEPS));
    return p->steps;
}

static int has_step(const kvt_sampler_params *p, kvt_sample_step want) {
    int32_t n;
    const uint8_t *st = steps_of(p, &n);
    for (int32_t i = 0; i < n; i++)
        if (st[i] == want) return 1;
    return 0;
}

int kvt_sampler_order_has(const kvt_sampler_params *p, int st) { return has_step(p, (kvt_sample_step)st); }

static int typical_on(const kvt_sampler_params *p) { return p->typical_p > 0 && p->typical_p < 1; }
static int xtc_on(const kvt_sampler_params *p) { return p->xtc_probability > 0 && p->xtc_threshold <= 0.5f; }

kvt_sampler_params kvt_sampler_default_params(void) {
    kvt_sampler_params p = {0};
    p.temp = 0.8f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.seed = 0;
    /* llama.cpp's values of the knobs that matter only once their sampler is on */
    p.typical_p = 1.0f;
    p.xtc_threshold = 0.1f;
    p.dynatemp_exponent = 1.0f;
    p.mirostat_tau = 5.0f;
    p.mirostat_eta = 0.1f;
    p.dry_base = 1.75f;
    p.dry_allowed_length = 2;
    p.dry_penalty_last_n = -1;
    return p;
}

const char *const kvt_dry_default_breakers[KVT_DRY_DEFAULT_BREAKERS] = {"\n", ":", "\"", "*"};

uint32_t kvt_sampler_rand(kvt_sampler *s) {
    uint64_t old = s->state;
    s->state = old * PCG_MULT + PCG_INC;
    uint32_t xs = (uint32_t)(((old >> 18) ^ old) >> 27);
    uint32_t rot = (uint32_t)(old >> 59);
    return (xs >> rot) | (xs << ((32 - rot) & 31));
}

kvt_sampler *kvt_sampler_new(kvt_sampler_params params, int32_t n_vocab) {
    if (n_vocab < 1) return NULL;
    kvt_sampler *s = kvt_xcalloc(1, sizeof *s);
    s->p = params;
    s->n_vocab = n_vocab;
    s->state = 0;
    kvt_sampler_rand(s);
    s->state += params.seed;
    kvt_sampler_rand(s);
    s->c = kvt_xmalloc((size_t)n_vocab * sizeof *s->c);
    s->prob = kvt_xmalloc((size_t)n_vocab * sizeof *s->prob);
    if (params.n_bias > 0) {
        s->bias_id = kvt_xmalloc((size_t)params.n_bias * sizeof *s->bias_id);
        s->bias = kvt_xmalloc((size_t)params.n_bias * sizeof *s->bias);
        memcpy(s->bias_id, params.bias_id, (size_t)params.n_bias * sizeof *s->bias_id);
        memcpy(s->bias, params.bias, (size_t)params.n_bias * sizeof *s->bias);
    } else {
        s->p.n_bias = 0;
    }
    s->p.bias_id = s->bias_id;
    s->p.bias = s->bias;
    s->penalize = (params.presence_penalty != 0 || params.frequency_penalty != 0 ||
                   (params.repeat_penalty > 0 && params.repeat_penalty != 1)) &&
        has_step(&params, KVT_SAMPLE_PENALTIES);
    if (s->penalize) s->count = kvt_xcalloc((size_t)n_vocab, sizeof *s->count);
    s->repeat = params.repetition_penalty > 0 && params.repetition_penalty != 1 &&
        has_step(&params, KVT_SAMPLE_PENALTIES);
    if (s->repeat) {
        s->seen = kvt_xcalloc((size_t)n_vocab, 1);
        s->seen_ids = kvt_xmalloc((size_t)n_vocab * sizeof *s->seen_ids);
    }
    if (typical_on(&s->p)) s->aux = kvt_xmalloc((size_t)n_vocab * sizeof *s->aux);
    s->infill = params.infill && has_step(&params, KVT_SAMPLE_INFILL);
    if (s->infill) {
        s->ip = kvt_xmalloc((size_t)n_vocab * sizeof *s->ip);
        s->ikeep = kvt_xmalloc((size_t)n_vocab);
        s->iids = kvt_xmalloc((size_t)n_vocab * sizeof *s->iids);
    }
    s->dry = params.dry_multiplier != 0 && params.dry_base >= 1 && params.dry_penalty_last_n != 0 &&
        has_step(&params, KVT_SAMPLE_DRY);
    if (s->dry) {
        s->dry_len = kvt_xcalloc((size_t)n_vocab, sizeof *s->dry_len);
        if (params.dry_breaker) {
            s->breaker = kvt_xmalloc((size_t)n_vocab);
            memcpy(s->breaker, params.dry_breaker, (size_t)n_vocab);
        }
    }
    s->p.dry_breaker = s->breaker;
    if (s->penalize || s->repeat || s->p.n_bias || s->dry) s->work = kvt_xmalloc((size_t)n_vocab * sizeof *s->work);
    s->mu = 2.0 * (double)params.mirostat_tau;
    return s;
}

/* DRY's window of the history: its last w tokens, at *h. */
static int32_t dry_window(const kvt_sampler *s, const int32_t **h) {
    int32_t w = s->p.dry_penalty_last_n > 0 ? KVT_MIN(s->n_dry, s->p.dry_penalty_last_n) : s->n_dry;
    *h = s->dry_hist + s->n_dry - w;
    return w;
}

/* Finds, for each token, the longest repeat of the window's end it would
 * extend, as dry_len[token] = length + 1 (0: none), capped at the tokens
 * since the latest breaker. z[k] (a Z-function over the window read
 * backwards) is how many tokens end at both the window's end and k tokens
 * before it; the token that followed that earlier run would extend it.
 * Returns the window's length, or 0 when no token is penalized. */
static int32_t dry_scan(kvt_sampler *s) {
    const int32_t *h;
    int32_t w = dry_window(s, &h), last = w - 1, allowed = s->p.dry_allowed_length;
    if (w <= allowed || w < 2) return 0;
    int32_t limit = w;
    for (int32_t i = 0; i < w && s->breaker; i++)
        if (h[last - i] >= 0 && s->breaker[h[last - i]]) {
            limit = i;
            break;
        }
    if (limit < allowed) return 0;
    int32_t *z = s->dry_z, lo = 0, hi = 0; /* [lo, hi): the match reaching furthest so far */
    for (int32_t k = 1; k < w; k++) {
        int32_t n = k < hi ? KVT_MIN(hi - k, z[k - lo]) : 0;
        while (k + n < w && h[last - n] == h[last - k - n]) n++;
        z[k] = n;
        if (k + n > hi) lo = k, hi = k + n;
        n = KVT_MIN(n, limit);
        int32_t tok = h[last - k + 1];
        if (tok >= 0 && n >= allowed && n + 1 > s->dry_len[tok]) s->dry_len[tok] = n + 1;
    }
    return w;
}

/* What DRY takes from tok's logit after dry_scan (0 for a breaker or a token it did not mark). */
static float dry_penalty(const kvt_sampler *s, int32_t tok) {
    int32_t n = s->dry_len[tok] - 1;
    if (n < 0 || (s->breaker && s->breaker[tok])) return 0;
    double e = n - s->p.dry_allowed_length, base = s->p.dry_base;
    double cap = base > 1.000001 ? log(FLT_MAX) / log(base) : 0; /* keeps the penalty a finite float */
    if (cap > 0 && e > cap) e = cap;
    return (float)(s->p.dry_multiplier * pow(base, e));
}

/* Clears dry_len after a scan of a window of w tokens. */
static void dry_clear(kvt_sampler *s, int32_t w) {
    const int32_t *h;
    dry_window(s, &h);
    for (int32_t i = 1; i < w; i++)
        if (h[i] >= 0) s->dry_len[h[i]] = 0;
}

/* DRY on every token's logit (the greedy path). */
static void dry_logits(kvt_sampler *s, float *l) {
    int32_t w = dry_scan(s);
    const int32_t *h;
    dry_window(s, &h);
    for (int32_t i = 1; i < w; i++) {
        if (h[i] < 0) continue;
        l[h[i]] -= dry_penalty(s, h[i]);
        s->dry_len[h[i]] = 0; /* each token once */
    }
}

/* The logits with the bias and (with_penalties) the penalties and DRY applied, in
 * s->work; the logits themselves when neither is on (the path then stays
 * exactly as without them). with_penalties needs s->penalize. */
static const float *adjusted(kvt_sampler *s, const float *logits, int with_penalties) {
    if (!s->work) return logits;
    memcpy(s->work, logits, (size_t)s->n_vocab * sizeof *s->work);
    for (int32_t i = 0; i < s->p.n_bias; i++)
        if (s->bias_id[i] >= 0 && s->bias_id[i] < s->n_vocab) s->work[s->bias_id[i]] += s->bias[i];
    if (!with_penalties) return s->work;
    int32_t from = s->p.penalty_last_n > 0 && s->n_hist > s->p.penalty_last_n ? s->n_hist - s->p.penalty_last_n : 0;
    for (int32_t i = from; i < s->n_hist; i++) s->count[s->hist[i]]++;
    /* each distinct token once: the first visit applies its penalty and clears its count */
    for (int32_t i = from; i < s->n_hist; i++) {
        int32_t t = s->hist[i], c = s->count[t];
        if (!c) continue;
        float *l = &s->work[t];
        float rp = s->p.repeat_penalty;
        if (rp > 0 && rp != 1) *l = *l > 0 ? *l / rp : *l * rp;
        *l -= (float)c * s->p.frequency_penalty + s->p.presence_penalty;
        s->count[t] = 0;
    }
    for (int32_t i = 0; i < s->n_seen; i++) { /* vLLM's repetition_penalty, once per token seen */
        float *l = &s->work[s->seen_ids[i]];
        *l = *l > 0 ? *l / s->p.repetition_penalty : *l * s->p.repetition_penalty;
    }
    if (s->dry) dry_logits(s, s->work); /* after the penalties, as in the order */
    return s->work;
}

/* Before n more ids (at most keep, where keep > 0) go into a history h of *len that keeps at least its last
 * keep (<= 0: all of it): the oldest dropped in bulk, once the history would double the window. Returns
 * the capacity it then needs, at least cap (grown by doubling from `first`). */
static int32_t window_room(int32_t *h, int32_t *len, int32_t keep, int32_t n, int32_t cap, int32_t first) {
    if (keep > 0 && *len + n > 2 * keep) {
        int32_t drop = *len + n - keep;
        memmove(h, h + drop, (size_t)(*len - drop) * sizeof *h);
        *len -= drop;
    }
    return *len + n > cap ? KVT_MAX(*len + n, cap ? 2 * cap : first) : cap;
}

/* Appends ids[0..n) to DRY's history, keeping at least its last dry_penalty_last_n tokens. */
static void dry_push(kvt_sampler *s, const int32_t *ids, int32_t n) {
    int32_t keep = s->p.dry_penalty_last_n;
    if (keep > 0 && n > keep) ids += n - keep, n = keep;
    int32_t cap = window_room(s->dry_hist, &s->n_dry, keep, n, s->cap_dry, 256);
    if (cap != s->cap_dry) {
        s->cap_dry = cap;
        s->dry_hist = kvt_xrealloc(s->dry_hist, (size_t)s->cap_dry * sizeof *s->dry_hist);
        s->dry_z = kvt_xrealloc(s->dry_z, (size_t)s->cap_dry * sizeof *s->dry_z);
    }
    /* a prompt id past the logits (a tokenizer larger than the output) is kept as -1: never a candidate */
    for (int32_t i = 0; i < n; i++) s->dry_hist[s->n_dry + i] = ids[i] >= 0 && ids[i] < s->n_vocab ? ids[i] : -1;
    s->n_dry += n;
}

/* Marks ids[0..n) as seen for repetition_penalty (those past the logits are never candidates). */
static void mark_seen(kvt_sampler *s, const int32_t *ids, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < s->n_vocab && !s->seen[ids[i]]) {
            s->seen[ids[i]] = 1;
            s->seen_ids[s->n_seen++] = ids[i];
        }
}

/* Appends ids[0..n) to the penalties' history, keeping at least its last penalty_last_n tokens (ids past
 * the logits, a tokenizer larger than the output, are never candidates: left out). */
static void hist_push(kvt_sampler *s, const int32_t *ids, int32_t n) {
    int32_t keep = s->p.penalty_last_n;
    if (keep > 0 && n > keep) ids += n - keep, n = keep;
    int32_t cap = window_room(s->hist, &s->n_hist, keep, n, s->cap_hist, 64);
    if (cap != s->cap_hist) {
        s->cap_hist = cap;
        s->hist = kvt_xrealloc(s->hist, (size_t)s->cap_hist * sizeof *s->hist);
    }
    for (int32_t i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < s->n_vocab) s->hist[s->n_hist++] = ids[i];
}

void kvt_sampler_prompt(kvt_sampler *s, const int32_t *ids, int32_t n) {
    if (n <= 0) return;
    if (s->dry) dry_push(s, ids, n);
    if (s->repeat) mark_seen(s, ids, n);
    if (s->penalize) hist_push(s, ids, n);
}

/* Remembers a returned token for the penalties and DRY. */
static int32_t returned(kvt_sampler *s, int32_t tok) {
    if (s->dry) dry_push(s, &tok, 1);
    if (s->repeat) mark_seen(s, &tok, 1);
    if (s->penalize) hist_push(s, &tok, 1);
    return tok;
}

void kvt_sampler_free(kvt_sampler *s) {
    if (!s) return;
    free(s->c);
    free(s->prob);
    free(s->bias_id);
    free(s->bias);
    free(s->hist);
    free(s->count);
    free(s->work);
    free(s->aux);
    free(s->ip);
    free(s->ikeep);
    free(s->iids);
    free(s->tmp);
    free(s->seen);
    free(s->seen_ids);
    free(s->breaker);
    free(s->dry_hist);
    free(s->dry_z);
    free(s->dry_len);
    free(s);
}

int32_t kvt_argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

void kvt_logprobs(const float *logits, int32_t n, int32_t chosen, int32_t n_top, double *chosen_lp, int32_t *top_id,
                  double *top_lp) {
    double max = logits[0], sum = 0;
    for (int32_t i = 1; i < n; i++) max = logits[i] > max ? logits[i] : max;
    for (int32_t i = 0; i < n; i++) sum += exp((double)logits[i] - max);
    double norm = max + log(sum); /* log sum exp(logits) */
    *chosen_lp = (double)logits[chosen] - norm;
    /* insertion into a short sorted list: n_top is small (OpenAI allows 20) */
    int32_t k = 0;
    for (int32_t i = 0; i < n && n_top > 0; i++) {
        if (k == n_top && logits[i] <= logits[top_id[k - 1]]) continue;
        int32_t j = k < n_top ? k++ : n_top - 1;
        while (j > 0 && logits[i] > logits[top_id[j - 1]]) {
            top_id[j] = top_id[j - 1];
            j--;
        }
        top_id[j] = i;
    }
    for (int32_t j = 0; j < k; j++) top_lp[j] = (double)logits[top_id[j]] - norm;
}

static int by_logit_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->l != y->l) return x->l > y->l ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* The candidates and what the steps know of them. */
typedef struct {
    int32_t n;
    int sorted; /* ranked by logit (ties to the lower id), the tokens at -inf dropped */
    int probs;  /* prob[0..n) and sum are the softmax of what is left (top-p's, as it left them) */
    double sum;
} cands;

static void swap_cand(cand *a, cand *b) {
    cand t = *a;
    *a = *b;
    *b = t;
}

/* Moves the `want` best of c[0..n) (by_logit_desc's order) to c[0..want), in
 * no particular order: quickselect with a median-of-three pivot, in time
 * linear in n on average. The order is total (ties go to the lower id), so
 * which candidates end up there never depends on the pivots. */
static void select_best(cand *c, int32_t n, int32_t want) {
    int32_t lo = 0, hi = n - 1;
    const int32_t kth = want - 1;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (by_logit_desc(&c[mid], &c[lo]) < 0) swap_cand(&c[mid], &c[lo]);
        if (by_logit_desc(&c[hi], &c[lo]) < 0) swap_cand(&c[hi], &c[lo]);
        if (by_logit_desc(&c[hi], &c[mid]) < 0) swap_cand(&c[hi], &c[mid]);
        const cand pivot = c[mid];
        int32_t i = lo, j = hi;
        while (i <= j) {
            while (i <= hi && by_logit_desc(&c[i], &pivot) < 0) i++;
            while (j >= lo && by_logit_desc(&pivot, &c[j]) < 0) j--;
            if (i <= j) swap_cand(&c[i++], &c[j--]);
        }
        if (kth <= j) hi = j;
        else if (kth >= i) lo = i;
        else break;
    }
}

/* A logit as an unsigned key that is smallest for the largest logit (-0 as +0, which it equals). */
static uint64_t rank_key(double l) {
    uint64_t b;
    if (l == 0) l = 0;
    memcpy(&b, &l, sizeof b);
    return b >> 63 ? b : ~(b | 1ull << 63); /* IEEE bits order positives up and negatives down */
}

#define RADIX_BITS 11
#define RADIX_PASSES 6 /* 6 x 11 bits cover the 64 of a double */

/* c[0..n) in by_logit_desc's order, as qsort would leave them: a stable LSD
 * radix sort on the logits' keys (tmp holds n), then each run of equal
 * logits in id order; but for keep_inf 0, a run at -inf past the first
 * candidate is left as it is (rank_best drops it). Linear in n, where a
 * comparison sort of a 150,000-token vocabulary took tens of milliseconds a
 * token. */
static void radix_rank(cand *c, cand *tmp, int32_t n, int keep_inf) {
    static const uint32_t MASK = (1u << RADIX_BITS) - 1;
    uint32_t count[RADIX_PASSES][1u << RADIX_BITS];
    memset(count, 0, sizeof count);
    for (int32_t i = 0; i < n; i++) {
        uint64_t key = rank_key(c[i].l);
        for (int p = 0; p < RADIX_PASSES; p++) count[p][(key >> (p * RADIX_BITS)) & MASK]++;
    }
    cand *from = c, *to = tmp;
    for (int p = 0; p < RADIX_PASSES; p++) {
        uint32_t *cp = count[p], at = 0;
        if (cp[(rank_key(c[0].l) >> (p * RADIX_BITS)) & MASK] == (uint32_t)n) continue; /* one digit: nothing moves */
        for (uint32_t d = 0; d <= MASK; d++) {
            uint32_t here = cp[d];
            cp[d] = at;
            at += here;
        }
        for (int32_t i = 0; i < n; i++) to[cp[(rank_key(from[i].l) >> (p * RADIX_BITS)) & MASK]++] = from[i];
        cand *t = from;
        from = to, to = t;
    }
    if (from != c) memcpy(c, from, (size_t)n * sizeof *c);
    for (int32_t i = 0, j; i < n; i = j) {
        for (j = i + 1; j < n && c[j].l == c[i].l;) j++;
        if (j - i < 2 || (!keep_inf && i > 0 && isinf(c[i].l) && c[i].l < 0)) continue;
        qsort(c + i, (size_t)(j - i), sizeof *c, by_logit_desc); /* equal logits: by id */
    }
}

#define RADIX_MIN 4096 /* fewer candidates sort faster by comparison */

/* c[0..n) in by_logit_desc's order (see radix_rank for keep_inf): a radix
 * sort from RADIX_MIN candidates on, through *tmp (made on first use, cap
 * candidates), a comparison sort below. */
static void sort_cands(cand *c, int32_t n, cand **tmp, int32_t cap, int keep_inf) {
    if (n < RADIX_MIN) {
        if (n > 1) qsort(c, (size_t)n, sizeof *c, by_logit_desc);
        return;
    }
    if (!*tmp) *tmp = kvt_xmalloc((size_t)cap * sizeof **tmp);
    radix_rank(c, *tmp, n, keep_inf);
}

/* Ranks the candidates; want > 0: only the best `want` of them are needed
 * (top-k), so they are picked first and only they are sorted. Either way the
 * first candidates are those a full sort puts first. */
static void rank_best(kvt_sampler *s, cands *k, int32_t want) {
    if (k->sorted) return;
    if (want > 0 && want < k->n) {
        select_best(s->c, k->n, want);
        k->n = want;
    }
    sort_cands(s->c, k->n, &s->tmp, s->n_vocab, 0);
    /* a token at -inf (refused by a grammar) is never a candidate, not even through rounding at the end */
    while (k->n > 1 && isinf(s->c[k->n - 1].l) && s->c[k->n - 1].l < 0) k->n--;
    k->sorted = 1;
}

static void rank(kvt_sampler *s, cands *k) { rank_best(s, k, 0); }

void kvt_sampler_rank(const double *logits, int32_t n, int32_t *order) {
    cand *c = kvt_xmalloc((size_t)KVT_MAX(n, 1) * sizeof *c), *tmp = NULL;
    for (int32_t i = 0; i < n; i++) c[i] = (cand){logits[i], i};
    sort_cands(c, n, &tmp, n, 1);
    for (int32_t i = 0; i < n; i++) order[i] = c[i].id;
    free(c);
    free(tmp);
}

/* The softmax of the ranked candidates into prob (floats), their sum (of the doubles) into k->sum. */
static void softmax(kvt_sampler *s, cands *k) {
    double max = s->c[0].l, sum = 0;
    for (int32_t i = 0; i < k->n; i++) {
        double e = exp(s->c[i].l - max);
        s->prob[i] = (float)e;
        sum += e;
    }
    k->sum = sum;
}

/* The penalties on the candidates whose tokens the window holds (in float, as on the logits). */
static void penalize(kvt_sampler *s, cands *k) {
    int32_t from = s->p.penalty_last_n > 0 && s->n_hist > s->p.penalty_last_n ? s->n_hist - s->p.penalty_last_n : 0;
    for (int32_t i = from; i < s->n_hist; i++) s->count[s->hist[i]]++;
    float rp = s->p.repeat_penalty, vp = s->p.repetition_penalty;
    for (int32_t j = 0; j < k->n; j++) {
        int32_t n = s->penalize ? s->count[s->c[j].id] : 0;
        int seen = s->repeat && s->seen[s->c[j].id];
        if (!n && !seen) continue;
        float l = (float)s->c[j].l;
        if (n && rp > 0 && rp != 1) l = l > 0 ? l / rp : l * rp;
        if (n) l -= (float)n * s->p.frequency_penalty + s->p.presence_penalty;
        if (seen) l = l > 0 ? l / vp : l * vp; /* after them, as the greedy path applies it */
        s->c[j].l = l;
    }
    for (int32_t i = from; i < s->n_hist; i++) s->count[s->hist[i]] = 0;
    k->sorted = 0;
}

/* The least number of candidates a filter leaves (min_keep, at least one). */
static int32_t min_keep(const kvt_sampler *s) { return KVT_MAX(1, s->p.min_keep); }

/* A uniform double in [0, 1) from the generator. */
static double uniform(kvt_sampler *s) {
    return (double)(kvt_sampler_rand(s) >> (32 - UNIFORM_BITS)) / (double)(1u << UNIFORM_BITS);
}

static void top_p(kvt_sampler *s, cands *k) {
    rank(s, k);
    softmax(s, k);
    double cum = 0;
    for (int32_t i = 0; i < k->n; i++) {
        cum += s->prob[i] / k->sum;
        if (cum >= s->p.top_p && i + 1 >= min_keep(s)) {
            k->n = i + 1;
            break;
        }
    }
    k->sum = 0;
    for (int32_t i = 0; i < k->n; i++) k->sum += s->prob[i];
    k->probs = 1;
}

/* The entropy, in nats, of the candidates' softmax (after softmax()). */
static double entropy(const kvt_sampler *s, const cands *k) {
    double h = 0;
    for (int32_t i = 0; i < k->n; i++) {
        double p = s->prob[i] / k->sum;
        if (p > 0) h -= p * log(p);
    }
    return h;
}

/* Locally typical sampling: the candidates whose surprise -ln p is nearest
 * the distribution's entropy, nearest first, until their probability
 * exceeds typical_p. The ones kept stay in rank order (s->aux holds each
 * candidate's negated distance with its rank, ranked as logits are: ties
 * to the better rank). */
static void typical(kvt_sampler *s, cands *k) {
    rank(s, k);
    softmax(s, k);
    double h = entropy(s, k);
    for (int32_t i = 0; i < k->n; i++) {
        double p = s->prob[i] / k->sum;
        s->aux[i] = (cand){p > 0 ? -fabs(-log(p) - h) : -INFINITY, i}; /* negated: ranked by distance */
    }
    sort_cands(s->aux, k->n, &s->tmp, s->n_vocab, 1);
    int32_t keep = k->n;
    double cum = 0;
    for (int32_t i = 0; i < k->n; i++) {
        cum += s->prob[s->aux[i].id] / k->sum;
        if (cum > s->p.typical_p && i + 1 >= min_keep(s)) {
            keep = i + 1;
            break;
        }
    }
    /* mark the kept ranks (a negative logit id is never a token), then close the gaps in rank order */
    for (int32_t i = 0; i < keep; i++) s->c[s->aux[i].id].id = -1 - s->c[s->aux[i].id].id;
    int32_t n = 0;
    for (int32_t i = 0; i < k->n; i++)
        if (s->c[i].id < 0) s->c[n++] = (cand){s->c[i].l, -1 - s->c[i].id};
    k->n = n;
    k->probs = 0;
}

/* XTC: at xtc_probability, the candidates whose probability reaches the
 * threshold are dropped but for the least likely of them, so the reply
 * leaves its most predictable path; nothing when fewer than two reach it
 * or fewer than min_keep would be left. The chance is drawn first, so the
 * generator advances once per token whatever happens. */
static void xtc(kvt_sampler *s, cands *k) {
    if (k->n < 2) return;
    if (uniform(s) > (double)s->p.xtc_probability) return;
    rank(s, k);
    softmax(s, k);
    int32_t last = 0; /* the last of the leading candidates at or above the threshold (0: fewer than two) */
    while (last + 1 < k->n && s->prob[last + 1] / k->sum >= (double)s->p.xtc_threshold) last++;
    if (last == 0 || k->n - last < min_keep(s)) return;
    memmove(s->c, s->c + last, (size_t)(k->n - last) * sizeof *s->c);
    k->n -= last;
    k->probs = 0;
}

/* The temperature, or with dynatemp_range the one the candidates' entropy
 * maps to: from max(0, temp - range) for a certain token to temp + range
 * for a uniform spread. At or below 0 only the best candidate is left. */
static void temperature(kvt_sampler *s, cands *k) {
    rank(s, k); /* ranked on the logits themselves, so ties keep their order */
    double t = s->p.temp;
    if (s->p.dynatemp_range > 0) {
        if (k->n < 2) return;
        softmax(s, k);
        double h = entropy(s, k);
        double lo = KVT_MAX(0.0, t - s->p.dynatemp_range), hi = t + s->p.dynatemp_range;
        t = lo + (hi - lo) * pow(h / log((double)k->n), (double)s->p.dynatemp_exponent);
    }
    if (t <= 0) {
        k->n = 1;
    } else {
        for (int32_t i = 0; i < k->n; i++) s->c[i].l = s->c[i].l / t;
    }
    k->probs = 0;
}

/* llama.cpp's infill step (sampler_infill.c) on the candidates, which keep their order; where no text
 * token is likely enough, the end-of-turn token alone. */
static void infill(kvt_sampler *s, cands *k) {
    rank(s, k);
    softmax(s, k);
    for (int32_t i = 0; i < k->n; i++) {
        s->ip[i] = s->prob[i] / k->sum;
        s->iids[i] = s->c[i].id;
    }
    int32_t kept = kvt_infill_keep(s->p.infill, s->iids, s->ip, k->n, s->ikeep);
    if (!kept && s->p.infill->eot >= 0 && s->p.infill->eot < s->n_vocab) {
        s->c[0] = (cand){1.0, s->p.infill->eot};
        k->n = 1;
    } else if (kept) {
        int32_t m = 0;
        for (int32_t i = 0; i < k->n; i++)
            if (s->ikeep[i]) s->c[m++] = s->c[i];
        k->n = m;
    }
    k->probs = 0;
}

/* One step of the order on the candidates. */
static void step(kvt_sampler *s, cands *k, uint8_t st) {
    switch (st) {
    case KVT_SAMPLE_PENALTIES:
        if (s->penalize || s->repeat) penalize(s, k), k->probs = 0;
        break;
    case KVT_SAMPLE_TOP_K:
        rank_best(s, k, s->p.top_k);
        if (s->p.top_k > 0 && s->p.top_k < k->n) k->n = s->p.top_k, k->probs = 0;
        break;
    case KVT_SAMPLE_MIN_P:
        if (s->p.min_p > 0) {
            /* p_i >= min_p * p_max is l_i >= l_max + log(min_p), on the logits as they are here */
            rank(s, k);
            double floor_l = s->c[0].l + log((double)s->p.min_p);
            int32_t keep = 1;
            while (keep < k->n && (s->c[keep].l >= floor_l || keep < min_keep(s))) keep++;
            k->n = keep;
            k->probs = 0;
        }
        break;
    case KVT_SAMPLE_TEMPERATURE: temperature(s, k); break;
    case KVT_SAMPLE_TOP_P:
        if (s->p.top_p < 1.0f) top_p(s, k);
        break;
    case KVT_SAMPLE_TYPICAL:
        if (typical_on(&s->p)) typical(s, k);
        break;
    case KVT_SAMPLE_XTC:
        if (xtc_on(&s->p)) xtc(s, k);
        break;
    case KVT_SAMPLE_INFILL:
        if (s->infill) infill(s, k);
        break;
    case KVT_SAMPLE_DRY:
        if (s->dry) {
            int32_t w = dry_scan(s);
            for (int32_t j = 0; j < k->n && w; j++) {
                float pen = dry_penalty(s, s->c[j].id);
                if (pen != 0) s->c[j].l = (float)s->c[j].l - pen; /* in float, as the penalties */
            }
            dry_clear(s, w);
            k->sorted = 0, k->probs = 0;
        }
        break;
    default: break;
    }
}

/* A draw from the ranked candidates' softmax: the index picked. */
static int32_t draw(kvt_sampler *s, cands *k) {
    rank(s, k);
    if (!k->probs) softmax(s, k);
    double u = uniform(s) * k->sum;
    double cum = 0;
    for (int32_t i = 0; i < k->n; i++) {
        cum += s->prob[i];
        if (u < cum) return i;
    }
    return k->n - 1; /* u landed in rounding slack at the very end */
}

/* Mirostat: the candidates are cut to those whose surprise stays within the
 * running bound mu (version 2), or to the top k that a Zipf fit of the 100
 * most likely predicts for mu (version 1); after the draw mu moves by eta
 * times the chosen token's surprise over tau. */
static int32_t mirostat(kvt_sampler *s, cands *k) {
    rank(s, k);
    for (int32_t i = 0; i < k->n; i++) s->c[i].l = s->c[i].l / (double)s->p.temp;
    softmax(s, k);
    if (s->p.mirostat == 1) {
        double sum_tb = 0, sum_tt = 0;
        for (int32_t i = 0; i < KVT_MIN(99, k->n - 1) && s->prob[i + 1] > 0; i++) {
            double t = log((double)(i + 2) / (double)(i + 1)), b = log((double)s->prob[i] / (double)s->prob[i + 1]);
            sum_tb += t * b;
            sum_tt += t * t;
        }
        double sh = sum_tt > 0 ? sum_tb / sum_tt : 1, eps = sh - 1;
        double top = pow(eps * pow(2, s->mu) / (1 - pow((double)s->n_vocab, -eps)), 1 / sh);
        k->n = isfinite(top) && top >= 1 ? (int32_t)KVT_MIN(top, (double)k->n) : 1;
    } else {
        int32_t keep = 0;
        while (keep < k->n && -log2(s->prob[keep] / k->sum) <= s->mu) keep++;
        k->n = KVT_MAX(keep, 1);
    }
    softmax(s, k);
    k->probs = 1;
    int32_t i = draw(s, k);
    s->mu -= (double)s->p.mirostat_eta * (-log2(s->prob[i] / k->sum) - (double)s->p.mirostat_tau);
    return s->c[i].id;
}

int32_t kvt_sampler_sample(kvt_sampler *s, const float *raw) {
    /* greedy picks the most likely token, unless a step that may drop it comes first or the temperature is dynamic */
    int plain_greedy = !typical_on(&s->p) && !xtc_on(&s->p) && !(s->p.dynatemp_range > 0) && !s->infill;
    if (s->p.temp <= 0.0f && (plain_greedy || s->p.mirostat))
        return returned(s, kvt_argmax(adjusted(s, raw, 1), s->n_vocab));
    const float *logits = adjusted(s, raw, s->p.mirostat != 0);
    for (int32_t i = 0; i < s->n_vocab; i++) s->c[i] = (cand){(double)logits[i], i};
    cands k = {.n = s->n_vocab};
    if (s->p.mirostat) return returned(s, mirostat(s, &k));
    int32_t n_steps;
    const uint8_t *steps = steps_of(&s->p, &n_steps);
    for (int32_t i = 0; i < n_steps; i++) step(s, &k, steps[i]);
    if (s->p.temp <= 0.0f && !(s->p.dynatemp_range > 0)) { /* greedy whatever the order: the best left */
        rank(s, &k);
        return returned(s, s->c[0].id);
    }
    return returned(s, s->c[draw(s, &k)].id);
}
