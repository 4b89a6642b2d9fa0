// SPDX-License-Identifier: MIT
/* llama.cpp's "infill" sampler step (sampler.h): the filter code-completion
 * clients (llama.vim, llama.vscode) put in their sampler order, which ends a
 * completion where ending is likely enough and otherwise keeps only the few
 * text tokens that clearly lead, a token whose text begins another's counting
 * for both. */
#include "sampler.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "tokenizer.h"

#define INFILL_EOG_WEIGHT 3  /* end-of-generation mass times this times the candidates beats the text mass */
#define INFILL_FIRST_CUT 0.2 /* text tokens below this probability go first */

kvt_infill_vocab *kvt_infill_vocab_new(const kvt_tokenizer *tok, int32_t n_ids) {
    kvt_infill_vocab *v = kvt_xcalloc(1, sizeof *v);
    int32_t n = KVT_MIN(n_ids, kvt_tokenizer_n_vocab(tok));
    v->n = KVT_MAX(n, 0);
    v->eog = kvt_xcalloc((size_t)v->n + 1, 1);
    v->off = kvt_xmalloc(((size_t)v->n + 1) * sizeof *v->off);
    size_t cap = 16 * ((size_t)v->n + 1), len = 0;
    v->bytes = kvt_xmalloc(cap);
    char buf[256];
    for (int32_t i = 0; i < v->n; i++) {
        v->eog[i] = (uint8_t)kvt_tokenizer_is_eog(tok, i);
        v->off[i] = (uint32_t)len;
        int k = kvt_token_piece(tok, i, buf, sizeof buf, 0); /* special tokens as nothing, as llama.cpp's step */
        if (k <= 0 || k > (int)sizeof buf) continue;         /* a piece longer than 256 bytes never begins others */
        if (len + (size_t)k > cap) {
            cap = 2 * cap + (size_t)k;
            v->bytes = kvt_xrealloc(v->bytes, cap);
        }
        memcpy(v->bytes + len, buf, (size_t)k);
        len += (size_t)k;
    }
    v->off[v->n] = (uint32_t)len;
    int32_t eot = kvt_tokenizer_eot(tok);
    v->eot = eot >= 0 && eot < v->n ? eot : kvt_tokenizer_eos(tok) < v->n ? kvt_tokenizer_eos(tok) : -1;
    return v;
}

void kvt_infill_vocab_free(kvt_infill_vocab *v) {
    if (!v) return;
    free(v->eog);
    free(v->off);
    free(v->bytes);
    free(v);
}

static int is_eog(const kvt_infill_vocab *v, int32_t id) { return id >= 0 && id < v->n && v->eog[id]; }

static const char *piece(const kvt_infill_vocab *v, int32_t id, size_t *len) {
    if (id < 0 || id >= v->n) {
        *len = 0;
        return "";
    }
    *len = v->off[id + 1] - v->off[id];
    return v->bytes + v->off[id];
}

int32_t kvt_infill_keep(const kvt_infill_vocab *v, const int32_t *ids, double *p, int32_t n, uint8_t *keep) {
    double p_eog = 0, p_txt = 0;
    for (int32_t i = 0; i < n; i++) *(is_eog(v, ids[i]) ? &p_eog : &p_txt) += p[i];
    int32_t kept = 0;
    if (INFILL_EOG_WEIGHT * p_eog * n > p_txt) { /* ending is likely enough: only the ways to end stay */
        for (int32_t i = 0; i < n; i++) kept += keep[i] = (uint8_t)is_eog(v, ids[i]);
        return kept;
    }
    for (int32_t i = 0; i < n; i++) keep[i] = 1;
    /* a token whose text begins another's: the likelier of the two takes the other's probability */
    for (int32_t i0 = 0; i0 < n; i0++) {
        size_t l0;
        const char *t0 = piece(v, ids[i0], &l0);
        for (int32_t i1 = 0; i1 < n && keep[i0] && l0; i1++) {
            size_t l1;
            const char *t1 = piece(v, ids[i1], &l1);
            if (i1 == i0 || !keep[i1] || l0 > l1 || memcmp(t0, t1, l0)) continue;
            int32_t dst = p[i1] > p[i0] ? i1 : i0, src = dst == i0 ? i1 : i0;
            p[dst] += p[src];
            p[src] = 0;
            keep[src] = 0;
        }
    }
    int32_t n_text = 0;
    double sum = 0;
    for (int32_t i = 0; i < n; i++) {
        if (!keep[i]) continue;
        int eog = is_eog(v, ids[i]);
        if (!eog && p[i] < INFILL_FIRST_CUT) {
            keep[i] = 0;
            continue;
        }
        n_text += !eog;
        sum += p[i];
    }
    if (!n_text) return 0;
    double cut = 1.0 / (n_text + 1);
    for (int32_t i = 0; i < n; i++) {
        if (keep[i] && !is_eog(v, ids[i]) && p[i] / sum < cut) keep[i] = 0;
        kept += keep[i];
    }
    return kept;
}
