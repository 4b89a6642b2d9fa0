// SPDX-License-Identifier: MIT
/* Samplers (see sampler.h). Candidates are ordered by logit then id, so the
 * outcome never depends on sort stability or on how ties were stored. */
#include "sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* PCG32 (O'Neill): 64-bit LCG state, xorshift-rotate output. */
#define PCG_MULT 6364136223846793005ull
#define PCG_INC 1442695040888963407ull
/* 24 random bits make a uniform float in [0, 1) with every value exact. */
#define UNIFORM_BITS 24

struct kvt_sampler {
    kvt_sampler_params p; /* bias_id and bias point at the copies below */
    int32_t n_vocab;
    uint64_t state;
    int32_t *idx;     /* (n_vocab) candidate ids */
    float *prob;      /* (n_vocab) candidate probabilities */
    int32_t *bias_id; /* (n_bias) owned copies of the params' logit bias */
    float *bias;
    int penalize;  /* any penalty on: keep the history */
    int32_t *hist; /* (n_hist of cap_hist) tokens returned so far */
    int32_t n_hist, cap_hist;
    int32_t *count; /* (n_vocab) occurrences in the penalty window, zero between calls */
    float *work;    /* (n_vocab) the logits after bias and penalties, when any is on */
};

kvt_sampler_params kvt_sampler_default_params(void) {
    kvt_sampler_params p = {0};
    p.temp = 0.8f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.seed = 0;
    return p;
}

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
    s->idx = kvt_xmalloc((size_t)n_vocab * sizeof *s->idx);
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
    s->penalize = params.presence_penalty != 0 || params.frequency_penalty != 0 ||
        (params.repeat_penalty > 0 && params.repeat_penalty != 1);
    if (s->penalize) s->count = kvt_xcalloc((size_t)n_vocab, sizeof *s->count);
    if (s->penalize || s->p.n_bias) s->work = kvt_xmalloc((size_t)n_vocab * sizeof *s->work);
    return s;
}

/* The logits with the bias and the penalties applied, in s->work; the logits
 * themselves when neither is on (the path then stays exactly as without them). */
static const float *adjusted(kvt_sampler *s, const float *logits) {
    if (!s->work) return logits;
    memcpy(s->work, logits, (size_t)s->n_vocab * sizeof *s->work);
    for (int32_t i = 0; i < s->p.n_bias; i++)
        if (s->bias_id[i] >= 0 && s->bias_id[i] < s->n_vocab) s->work[s->bias_id[i]] += s->bias[i];
    if (!s->penalize) return s->work;
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
    return s->work;
}

/* Remembers a returned token for the penalties. */
static int32_t returned(kvt_sampler *s, int32_t tok) {
    if (!s->penalize) return tok;
    if (s->n_hist == s->cap_hist) {
        s->cap_hist = s->cap_hist ? 2 * s->cap_hist : 64;
        s->hist = kvt_xrealloc(s->hist, (size_t)s->cap_hist * sizeof *s->hist);
    }
    s->hist[s->n_hist++] = tok;
    return tok;
}

void kvt_sampler_free(kvt_sampler *s) {
    if (!s) return;
    free(s->idx);
    free(s->prob);
    free(s->bias_id);
    free(s->bias);
    free(s->hist);
    free(s->count);
    free(s->work);
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

static const float *sort_logits; /* qsort has no context argument; samplers are not thread-shared */

static int by_logit_desc(const void *a, const void *b) {
    int32_t ia = *(const int32_t *)a, ib = *(const int32_t *)b;
    float la = sort_logits[ia], lb = sort_logits[ib];
    if (la != lb) return la > lb ? -1 : 1;
    return ia < ib ? -1 : ia > ib;
}

int32_t kvt_sampler_sample(kvt_sampler *s, const float *raw) {
    const float *logits = adjusted(s, raw);
    if (s->p.temp <= 0.0f) return returned(s, kvt_argmax(logits, s->n_vocab));
    int32_t n = s->n_vocab;
    for (int32_t i = 0; i < n; i++) s->idx[i] = i;
    sort_logits = logits;
    qsort(s->idx, (size_t)n, sizeof *s->idx, by_logit_desc);
    /* a token at -inf (refused by a grammar) is never a candidate, not even through rounding at the end */
    while (n > 1 && isinf(logits[s->idx[n - 1]]) && logits[s->idx[n - 1]] < 0) n--;
    if (s->p.top_k > 0 && s->p.top_k < n) n = s->p.top_k;
    if (s->p.min_p > 0) {
        /* p_i >= min_p * p_max at temperature 1 is l_i >= l_max + log(min_p), as llama.cpp (before temperature) */
        double floor_l = (double)logits[s->idx[0]] + log((double)s->p.min_p);
        int32_t keep = 1;
        while (keep < n && (double)logits[s->idx[keep]] >= floor_l) keep++;
        n = keep;
    }

    /* softmax over the survivors at temperature T, in double so long tails add up */
    double max = (double)logits[s->idx[0]] / s->p.temp, sum = 0;
    for (int32_t i = 0; i < n; i++) {
        double e = exp((double)logits[s->idx[i]] / s->p.temp - max);
        s->prob[i] = (float)e;
        sum += e;
    }
    if (s->p.top_p < 1.0f) {
        double cum = 0;
        int32_t keep = n;
        for (int32_t i = 0; i < n; i++) {
            cum += s->prob[i] / sum;
            if (cum >= s->p.top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
        sum = 0;
        for (int32_t i = 0; i < n; i++) sum += s->prob[i];
    }
    double u = (double)(kvt_sampler_rand(s) >> (32 - UNIFORM_BITS)) / (double)(1u << UNIFORM_BITS) * sum;
    double cum = 0;
    for (int32_t i = 0; i < n; i++) {
        cum += s->prob[i];
        if (u < cum) return returned(s, s->idx[i]);
    }
    return returned(s, s->idx[n - 1]); /* u landed in rounding slack at the very end */
}
