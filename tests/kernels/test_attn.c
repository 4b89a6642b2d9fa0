// SPDX-License-Identifier: MIT
/* Attention kernels (attn.h), in every variant this CPU runs (scalar, AVX2,
 * AVX-512; a variant it lacks is reported as a skipped part, with the reason).
 * For each variant:
 *   - kvt_attn_qk and kvt_attn_av (+ kvt_attn_av_sum) give the same bits as
 *     the scalar variant and stay within rounding of a double-precision
 *     reference; the value pass's lane sums are exactly fma chains over the
 *     keys of their class (t + lane0) mod 16, summed by the lane tree;
 *   - splitting the keys across calls (pages) or the heads across calls
 *     changes no bit (batch invariance);
 *   - one token's attention over a paged KV cache, as the engine runs it
 *     (f16, f32 and q8_0 pages, GQA, sliding windows, contexts of 1 to 4100
 *     keys), gives the same bits as the scalar variant and as itself with
 *     another page size, and matches a double-precision softmax attention;
 *   - reading q8_0 pages directly (kvt_attn_qk_q8 on a column block from any
 *     column, kvt_attn_av on q8_0 rows) gives the bits of reading their
 *     dequantized floats (kv_quant.h) as f32;
 *   - the decode walk (attn_decode.h) gives those bits too, and so does every
 *     split of it into parts (scores by pages, the value pass by lane
 *     classes) as 1 to 17 threads would run them, in any order.
 * Head counts and head dims are odd on purpose (33, 255 ...): every tail of
 * every tile is taken. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "attn_decode.h"
#include "kv_quant.h"
#include "ops.h"
#include "testutil.h"

#define N_VARIANTS 3
static const char *const variants[N_VARIANTS] = {"scalar", "avx2", "avx512"};
static int have[N_VARIANTS];

static float frand(unsigned *s) { return (float)rand_r(s) / (float)RAND_MAX * 2.0f - 1.0f; }

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    if (!p) {
        fprintf(stderr, "test_attn: out of memory\n");
        exit(1);
    }
    return p;
}

static float elem(const void *p, int f16, size_t i) {
    return f16 ? kvt_f16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

static void put_elem(void *p, int f16, size_t i, float x) {
    if (f16) ((uint16_t *)p)[i] = kvt_f32_to_f16(x);
    else ((float *)p)[i] = x;
}

/* Largest |got - ref| / mag over n elements. */
static double rel_err(const float *got, const double *ref, const double *mag, size_t n) {
    double e = 0;
    for (size_t i = 0; i < n; i++) e = fmax(e, fabs((double)got[i] - ref[i]) / (mag[i] + 1e-30));
    return e;
}

/* ---- the two kernels over one run of T keys ---------------------------- */

/* The value pass's contract written out (attn.h), independently of attn.c:
 * each lane sum is the fma chain from its carried value over the keys of its
 * class in order, and the output is the lane tree of ops.h over them. */
static void check_lanes(const float *w, int32_t G, const void *v, int f16, int32_t T, int32_t hd, int32_t lane0,
                        const float *acc0, const float *acc) {
    int bad = 0;
    for (int32_t g = 0; g < G; g++)
        for (int32_t d = 0; d < hd; d++) {
            float l[KVT_ATTN_LANES];
            for (int32_t j = 0; j < KVT_ATTN_LANES; j++) l[j] = acc0[((size_t)g * KVT_ATTN_LANES + j) * hd + d];
            for (int32_t t = 0; t < T; t++) {
                float *x = &l[(lane0 + t) % KVT_ATTN_LANES];
                *x = fmaf(w[(size_t)g * T + t], elem(v, f16, (size_t)t * hd + (size_t)d), *x);
            }
            for (int32_t j = 0; j < KVT_ATTN_LANES; j++)
                bad += memcmp(&l[j], &acc[((size_t)g * KVT_ATTN_LANES + j) * hd + d], sizeof(float)) != 0;
        }
    CHECKF(bad == 0, "av lane sums G%d hd%d T%d lane0 %d: %d differ from the fma chains\n", G, hd, T, lane0, bad);
}

static void kernel_case(int32_t G, int32_t hd, int32_t T, int f16, unsigned seed) {
    const size_t el = f16 ? 2 : 4, S = (size_t)T + 5; /* K row stride > T, as in a page */
    const float scale = 1.0f / sqrtf((float)hd);
    float *q = xcalloc((size_t)G * hd, sizeof(float)), *w = xcalloc((size_t)G * T, sizeof(float));
    const int32_t lane0 = (int32_t)(seed % KVT_ATTN_LANES); /* the first key's position mod 16 */
    const size_t na = (size_t)G * KVT_ATTN_LANES * hd;
    float *acc = xcalloc(na, sizeof(float)), *acc2 = xcalloc(na, sizeof(float)), *out0 = xcalloc(na, sizeof(float));
    void *kt = xcalloc((size_t)hd * S, el), *v = xcalloc((size_t)T * hd, el);
    for (size_t i = 0; i < (size_t)G * hd; i++) q[i] = frand(&seed);
    for (size_t i = 0; i < na; i++) out0[i] = frand(&seed) / KVT_ATTN_LANES; /* lane sums carried in */
    for (size_t i = 0; i < (size_t)hd * S; i++) put_elem(kt, f16, i, frand(&seed));
    for (size_t i = 0; i < (size_t)T * hd; i++) put_elem(v, f16, i, frand(&seed));
    for (size_t i = 0; i < (size_t)G * T; i++) w[i] = fabsf(frand(&seed)) / (float)T;

    /* double-precision reference: scores, and the lanes of out0 + sum_t w[t] * v[t] */
    double *sref = xcalloc((size_t)G * T, sizeof(double)), *smag = xcalloc((size_t)G * T, sizeof(double));
    double *oref = xcalloc((size_t)G * hd, sizeof(double)), *omag = xcalloc((size_t)G * hd, sizeof(double));
    for (int32_t g = 0; g < G; g++) {
        for (int32_t t = 0; t < T; t++)
            for (int32_t d = 0; d < hd; d++) {
                double p = (double)q[g * hd + d] * elem(kt, f16, (size_t)d * S + (size_t)t) * scale;
                sref[g * T + t] += p;
                smag[g * T + t] += fabs(p);
            }
        for (int32_t d = 0; d < hd; d++) {
            for (int32_t j = 0; j < KVT_ATTN_LANES; j++) {
                oref[g * hd + d] += out0[((size_t)g * KVT_ATTN_LANES + j) * hd + d];
                omag[g * hd + d] += fabs(out0[((size_t)g * KVT_ATTN_LANES + j) * hd + d]);
            }
            for (int32_t t = 0; t < T; t++) {
                double p = (double)w[g * T + t] * elem(v, f16, (size_t)t * hd + (size_t)d);
                oref[g * hd + d] += p;
                omag[g * hd + d] += fabs(p);
            }
        }
    }

    float *sc[N_VARIANTS] = {0}, *out[N_VARIANTS] = {0};
    float *sc2 = xcalloc((size_t)G * T, sizeof(float)), *out2 = xcalloc((size_t)G * hd, sizeof(float));
    const int32_t cut = T / 3;
    for (int vi = 0; vi < N_VARIANTS; vi++) {
        if (!have[vi]) continue;
        kvt_ops_force_variant(variants[vi]);
        sc[vi] = xcalloc((size_t)G * T, sizeof(float));
        out[vi] = xcalloc((size_t)G * hd, sizeof(float));
        kvt_attn_qk(q, G, hd, kt, (int32_t)S, f16, T, scale, sc[vi], T);
        const kvt_attn_run whole = {v, w, T, lane0};
        kvt_attn_av(&whole, 1, T, G, f16, hd, out0, acc, out[vi]);
        if (vi == 0) check_lanes(w, G, v, f16, T, hd, lane0, out0, acc);
        double eq = rel_err(sc[vi], sref, smag, (size_t)G * T), ea = rel_err(out[vi], oref, omag, (size_t)G * hd);
        CHECKF(eq < 1e-5, "%s qk G%d hd%d T%d f16=%d: relative error %g\n", variants[vi], G, hd, T, f16, eq);
        CHECKF(ea < 1e-5, "%s av G%d hd%d T%d f16=%d: relative error %g\n", variants[vi], G, hd, T, f16, ea);
        if (vi > 0) {
            CHECKF(!memcmp(sc[vi], sc[0], sizeof(float) * (size_t)G * T), "%s qk differs from scalar G%d hd%d T%d\n",
                   variants[vi], G, hd, T);
            CHECKF(!memcmp(out[vi], out[0], sizeof(float) * (size_t)G * hd), "%s av differs from scalar G%d hd%d T%d\n",
                   variants[vi], G, hd, T);
        }
        /* the keys in two calls (two pages), the heads one call each: same bits */
        /* ... and the value pass as two runs in one call, and as one call per
         * run (the lane sums carried), the first one head per call */
        const kvt_attn_run two[2] = {{v, w, cut, lane0},
                                     {(const char *)v + el * (size_t)cut * hd, w + cut, T - cut, lane0 + cut}};
        kvt_attn_av(two, 2, T, G, f16, hd, out0, NULL, out2);
        CHECKF(!memcmp(out2, out[vi], sizeof(float) * (size_t)G * hd), "%s av over two runs differs G%d hd%d T%d\n",
               variants[vi], G, hd, T);
        for (int32_t g = 0; g < G; g++) {
            const float *in = out0 + (size_t)g * KVT_ATTN_LANES * hd;
            const kvt_attn_run one = {v, w + (size_t)g * T, cut, lane0};
            kvt_attn_qk(q + (size_t)g * hd, 1, hd, kt, (int32_t)S, f16, cut, scale, sc2 + (size_t)g * T, T);
            kvt_attn_qk(q + (size_t)g * hd, 1, hd, (const char *)kt + el * (size_t)cut, (int32_t)S, f16, T - cut, scale,
                        sc2 + (size_t)g * T + cut, T);
            kvt_attn_av(&one, 1, T, 1, f16, hd, in, acc2 + (size_t)g * KVT_ATTN_LANES * hd, NULL);
        }
        memset(out2, 0, sizeof(float) * (size_t)G * hd);
        kvt_attn_av(&two[1], 1, T, G, f16, hd, acc2, acc2, out2);
        CHECKF(!memcmp(sc2, sc[vi], sizeof(float) * (size_t)G * T), "%s qk split differs G%d hd%d T%d\n", variants[vi],
               G, hd, T);
        CHECKF(!memcmp(out2, out[vi], sizeof(float) * (size_t)G * hd), "%s av split differs G%d hd%d T%d\n",
               variants[vi], G, hd, T);
    }
    for (int vi = 0; vi < N_VARIANTS; vi++) free(sc[vi]), free(out[vi]);
    free(sc2), free(out2), free(sref), free(smag), free(oref), free(omag);
    free(q), free(w), free(out0), free(acc), free(acc2), free(kt), free(v);
}

/* ---- one token's attention over a paged KV cache ------------------------- */

typedef struct {
    int32_t n_kv, G, hd, n_keys, window;
} paged_shape;

/* The KV of n_kv heads x n_keys tokens, stored in pages of B tokens in the
 * engine's layouts (attn.h, kv_quant.h): K transposed [hd][B] (q8_0: a column
 * block), V [B][hd] (q8_0: rows). val_k/val_v hold the values the stored
 * bytes represent, [head][token][dim]. */
typedef struct {
    int32_t B, n_pages;
    kvt_kv_dtype dt;
    size_t page_bytes;
    uint8_t *k, *v; /* [head][page] blocks of page_bytes */
} kv_pages;

static void pages_fill(kv_pages *p, const paged_shape *s, const float *keys, const float *vals) {
    const int f16 = p->dt == KVT_KV_F16;
    const size_t row = kvt_kv_row_bytes(p->dt, s->hd);
    uint8_t *qrow = xcalloc(row, 1);
    for (int32_t h = 0; h < s->n_kv; h++)
        for (int32_t t = 0; t < s->n_keys; t++) {
            const size_t at = ((size_t)h * p->n_pages + (size_t)(t / p->B)) * p->page_bytes;
            const int32_t slot = t % p->B;
            const float *kx = keys + ((size_t)h * s->n_keys + t) * s->hd,
                        *vx = vals + ((size_t)h * s->n_keys + t) * s->hd;
            if (p->dt == KVT_KV_Q8_0) {
                kvt_kv_q8_quantize_row(kx, s->hd, qrow);
                kvt_kv_q8_put_column(qrow, s->hd, p->B, slot, p->k + at);
                kvt_kv_q8_quantize_row(vx, s->hd, p->v + at + (size_t)slot * row);
                continue;
            }
            for (int32_t d = 0; d < s->hd; d++) {
                put_elem(p->k + at, f16, (size_t)d * p->B + (size_t)slot, kx[d]);
                put_elem(p->v + at, f16, (size_t)slot * s->hd + (size_t)d, vx[d]);
            }
        }
    free(qrow);
}

/* The value a stored q8_0 row element reads back as (kv_quant.h). */
static float q8_value(const uint8_t *row, int32_t i) {
    const uint8_t *blk = row + (size_t)(i / KVT_KV_Q8_BLOCK) * KVT_KV_Q8_BLOCK_BYTES;
    uint16_t d;
    memcpy(&d, blk, sizeof d);
    return kvt_f16_to_f32(d) * (float)(int8_t)blk[KVT_KV_Q8_SCALE_BYTES + i % KVT_KV_Q8_BLOCK];
}

/* What the stored K (kv = 0) or V (kv = 1) elements read back as, into
 * out[(head * n_keys + token) * hd + dim]. */
static void stored_values(const kv_pages *p, const paged_shape *s, int kv, float *out) {
    const size_t row_bytes = kvt_kv_row_bytes(p->dt, s->hd);
    const int32_t nb = s->hd / KVT_KV_Q8_BLOCK;
    uint8_t *row = xcalloc(row_bytes, 1);
    for (int32_t h = 0; h < s->n_kv; h++)
        for (int32_t t = 0; t < s->n_keys; t++) {
            const uint8_t *pg = (kv ? p->v : p->k) + ((size_t)h * p->n_pages + (size_t)(t / p->B)) * p->page_bytes;
            const size_t slot = (size_t)(t % p->B);
            float *o = out + ((size_t)h * s->n_keys + t) * s->hd;
            if (p->dt != KVT_KV_Q8_0) {
                const int f16 = p->dt == KVT_KV_F16;
                for (int32_t d = 0; d < s->hd; d++)
                    o[d] = kv ? elem(pg, f16, slot * s->hd + (size_t)d) : elem(pg, f16, (size_t)d * p->B + slot);
                continue;
            }
            if (kv) {
                memcpy(row, pg + slot * row_bytes, row_bytes);
            } else { /* gather column `slot` back into a row: scales [hd/32][B], then values [hd][B] */
                for (int32_t b = 0; b < nb; b++) {
                    memcpy(row + (size_t)b * KVT_KV_Q8_BLOCK_BYTES, pg + ((size_t)b * p->B + slot) * 2, 2);
                    for (int32_t i = 0; i < KVT_KV_Q8_BLOCK; i++)
                        row[(size_t)b * KVT_KV_Q8_BLOCK_BYTES + KVT_KV_Q8_SCALE_BYTES + i] =
                            pg[(size_t)nb * p->B * 2 + (size_t)(b * KVT_KV_Q8_BLOCK + i) * p->B + slot];
                }
            }
            for (int32_t d = 0; d < s->hd; d++) o[d] = q8_value(row, d);
        }
    free(row);
}

/* The engine's walk (engine.c attn_group) for the query of the token at
 * n_keys - 1: scores over keys [lo, n_keys) page by page (indexed from lo),
 * softmax, then the value pass page by page, one call each, the lane sums
 * carried from call to call (the engine makes one call over all pages, or
 * several for q8_0 pages). out: n_kv * G * hd. */
static void paged_attend(const kv_pages *p, const paged_shape *s, const float *q, float *out) {
    const int32_t pos = s->n_keys - 1, hd = s->hd, G = s->G, B = p->B;
    const int32_t lo = s->window && pos >= s->window ? pos - s->window + 1 : 0, n_att = s->n_keys - lo;
    const int f16 = p->dt == KVT_KV_F16, q8 = p->dt == KVT_KV_Q8_0;
    const float scale = 1.0f / sqrtf((float)hd);
    float *scores = xcalloc((size_t)G * n_att, sizeof(float)), *dq = xcalloc((size_t)B * hd, sizeof(float));
    float *acc = xcalloc((size_t)G * KVT_ATTN_LANES * hd, sizeof(float));
    for (int32_t h = 0; h < s->n_kv; h++) {
        const float *qh = q + (size_t)h * G * hd;
        float *oh = out + (size_t)h * G * hd;
        for (int pass = 0; pass < 2; pass++)
            for (int32_t first = lo; first < s->n_keys;) {
                const int32_t pg_i = first / B, a = first % B,
                              T = (pg_i + 1) * B < s->n_keys ? B - a : s->n_keys - first;
                const uint8_t *pg = (pass ? p->v : p->k) + ((size_t)h * p->n_pages + (size_t)pg_i) * p->page_bytes;
                float *sc = scores + (first - lo);
                if (pass == 0 && q8) {
                    kvt_kv_q8_dequant_columns(pg, B, a + T, hd, dq);
                    kvt_attn_qk(qh, G, hd, dq + a, B, 0, T, scale, sc, n_att);
                } else if (pass == 0) {
                    kvt_attn_qk(qh, G, hd, pg + (size_t)a * (f16 ? 2 : 4), B, f16, T, scale, sc, n_att);
                } else if (q8) {
                    kvt_kv_q8_dequant_rows(pg, a + T, hd, dq);
                    const kvt_attn_run run = {dq + (size_t)a * hd, sc, T, first};
                    kvt_attn_av(&run, 1, n_att, G, 0, hd, first == lo ? NULL : acc, acc, oh);
                } else {
                    const kvt_attn_run run = {pg + (size_t)a * hd * (f16 ? 2 : 4), sc, T, first};
                    kvt_attn_av(&run, 1, n_att, G, f16, hd, first == lo ? NULL : acc, acc, oh);
                }
                if (pass == 0 && first + T == s->n_keys)
                    for (int32_t g = 0; g < G; g++) kvt_softmax(scores + (size_t)g * n_att, n_att);
                first += T;
            }
    }
    free(acc);
    free(scores);
    free(dq);
}

/* Head h's attention by the decode walk (attn_decode.h), cut into `parts`
 * parts as that many threads would run them: the scores of each part's pages,
 * the softmax of each head's row, the value pass of each part's lane
 * classes, the parts taken in reverse order; then the lane tree. */
static void decode_attend(const kv_pages *p, const paged_shape *s, const float *q, int32_t parts, float *out) {
    const int32_t pos = s->n_keys - 1, hd = s->hd, G = s->G, B = p->B;
    const int32_t lo = s->window && pos >= s->window ? pos - s->window + 1 : 0;
    const int32_t chunk = kvt_attn_dec_chunk_pages(p->dt, B, hd);
    const uint8_t **pages = xcalloc((size_t)p->n_pages, sizeof *pages);
    kvt_attn_dec_buf buf = {xcalloc((size_t)G * (s->n_keys - lo + 3), sizeof(float)), s->n_keys - lo + 3,
                            xcalloc((size_t)G * KVT_ATTN_LANES * hd, sizeof(float)),
                            xcalloc((size_t)chunk, sizeof(kvt_attn_run))};
    for (int32_t h = 0; h < s->n_kv; h++) {
        for (int32_t pg = 0; pg < p->n_pages; pg++) pages[pg] = p->k + ((size_t)h * p->n_pages + pg) * p->page_bytes;
        const kvt_attn_dec a = {pages, p->v - p->k, p->dt, B, hd, G, lo, s->n_keys, 1.0f / sqrtf((float)hd), 0, 0};
        const float *qh = q + (size_t)h * G * hd;
        if (parts == 0) {
            kvt_attn_decode(&a, qh, out + (size_t)h * G * hd, &buf);
            continue;
        }
        const int32_t pf = kvt_attn_dec_first_page(&a), np = kvt_attn_dec_end_page(&a) - pf;
        const int32_t Q = parts < KVT_ATTN_LANES ? parts : KVT_ATTN_LANES;
        for (int32_t i = parts - 1; i >= 0; i--)
            kvt_attn_dec_scores(&a, qh, pf + np * i / parts, pf + np * (i + 1) / parts, &buf);
        for (int32_t g = G - 1; g >= 0; g--) kvt_attn_dec_softmax(&a, buf.scores + (size_t)g * buf.ld);
        for (int32_t i = Q - 1; i >= 0; i--)
            kvt_attn_dec_values(&a, KVT_ATTN_LANES * i / Q, KVT_ATTN_LANES * (i + 1) / Q, &buf);
        kvt_attn_dec_finish(&a, buf.acc, out + (size_t)h * G * hd);
    }
    free(pages), free(buf.scores), free(buf.acc), free(buf.runs);
}

/* K and V pages in one allocation (the decode walk finds V at a fixed
 * distance from K, as in the engine's pages); p->k is the one to free. */
static void kv_pages_init(kv_pages *p, const paged_shape *s, kvt_kv_dtype dt, int32_t B) {
    p->B = B;
    p->dt = dt;
    p->n_pages = (s->n_keys + B - 1) / B;
    p->page_bytes = (size_t)B * kvt_kv_row_bytes(dt, s->hd);
    p->k = xcalloc(2 * (size_t)s->n_kv * p->n_pages, p->page_bytes);
    p->v = p->k + (size_t)s->n_kv * p->n_pages * p->page_bytes;
}

static void paged_case(const paged_shape *s, kvt_kv_dtype dt, unsigned seed) {
    const int32_t hd = s->hd, G = s->G, nq = s->n_kv * G;
    const size_t kvn = (size_t)s->n_kv * s->n_keys * hd, on = (size_t)nq * hd;
    float *keys = xcalloc(kvn, sizeof(float)), *vals = xcalloc(kvn, sizeof(float)), *q = xcalloc(on, sizeof(float));
    for (size_t i = 0; i < kvn; i++) keys[i] = 2 * frand(&seed), vals[i] = frand(&seed);
    for (size_t i = 0; i < on; i++) q[i] = 2 * frand(&seed);
    kv_pages pa, pb; /* two page sizes: the result must not depend on it */
    kv_pages_init(&pa, s, dt, 16);
    kv_pages_init(&pb, s, dt, 64);
    pages_fill(&pa, s, keys, vals);
    pages_fill(&pb, s, keys, vals);

    /* double precision over the stored values */
    const int32_t pos = s->n_keys - 1, lo = s->window && pos >= s->window ? pos - s->window + 1 : 0;
    double *ref = xcalloc(on, sizeof(double)), *mag = xcalloc(on, sizeof(double));
    double *p = xcalloc((size_t)s->n_keys, sizeof(double));
    float *sk = xcalloc(kvn, sizeof(float)), *sv = xcalloc(kvn, sizeof(float));
    stored_values(&pa, s, 0, sk);
    stored_values(&pa, s, 1, sv);
    for (int32_t h = 0; h < s->n_kv; h++)
        for (int32_t g = 0; g < G; g++) {
            const float *qg = q + ((size_t)h * G + g) * hd;
            double mx = -INFINITY, sum = 0;
            for (int32_t t = lo; t < s->n_keys; t++) {
                double x = 0;
                for (int32_t d = 0; d < hd; d++) x += (double)qg[d] * sk[((size_t)h * s->n_keys + t) * hd + d];
                p[t] = x / sqrt((double)hd);
                mx = fmax(mx, p[t]);
            }
            for (int32_t t = lo; t < s->n_keys; t++) sum += (p[t] = exp(p[t] - mx));
            for (int32_t t = lo; t < s->n_keys; t++)
                for (int32_t d = 0; d < hd; d++) {
                    double x = p[t] / sum * sv[((size_t)h * s->n_keys + t) * hd + d];
                    ref[((size_t)h * G + g) * hd + d] += x;
                    mag[((size_t)h * G + g) * hd + d] += fabs(x);
                }
        }

    float *out[N_VARIANTS] = {0}, *outb = xcalloc(on, sizeof(float));
    for (int vi = 0; vi < N_VARIANTS; vi++) {
        if (!have[vi]) continue;
        kvt_ops_force_variant(variants[vi]);
        out[vi] = xcalloc(on, sizeof(float));
        paged_attend(&pa, s, q, out[vi]);
        paged_attend(&pb, s, q, outb);
        const char *dn = kvt_kv_dtype_name(dt);
        double e = rel_err(out[vi], ref, mag, on);
        CHECKF(e < 2e-5, "%s %s paged kv%d G%d hd%d keys%d window%d: relative error %g\n", variants[vi], dn, s->n_kv, G,
               hd, s->n_keys, s->window, e);
        CHECKF(!memcmp(outb, out[vi], sizeof(float) * on), "%s %s paged kv%d G%d hd%d keys%d: page size changes bits\n",
               variants[vi], dn, s->n_kv, G, hd, s->n_keys);
        if (vi > 0)
            CHECKF(!memcmp(out[vi], out[0], sizeof(float) * on),
                   "%s %s paged kv%d G%d hd%d keys%d window%d: differs from scalar\n", variants[vi], dn, s->n_kv, G, hd,
                   s->n_keys, s->window);
        /* the decode walk: the walk above's bits where its softmax starts at key 0 (it takes its lanes from 0, the
         * decode walk from the first key seen), its own whole-row bits under every split and page size */
        float *dec = xcalloc(on, sizeof(float));
        decode_attend(&pa, s, q, 0, dec);
        if (lo == 0)
            CHECKF(!memcmp(dec, out[vi], sizeof(float) * on), "%s %s decode kv%d G%d hd%d keys%d: differs from paged\n",
                   variants[vi], dn, s->n_kv, G, hd, s->n_keys);
        CHECKF(rel_err(dec, ref, mag, on) < 2e-5, "%s %s decode kv%d G%d hd%d keys%d window%d: relative error\n",
               variants[vi], dn, s->n_kv, G, hd, s->n_keys, s->window);
        static const int32_t parts[] = {1, 2, 3, 4, 5, 8, 16, 17};
        for (size_t pi = 0; pi < sizeof parts / sizeof *parts; pi++)
            for (int pb_i = 0; pb_i < 2; pb_i++) {
                decode_attend(pb_i ? &pb : &pa, s, q, parts[pi], outb);
                CHECKF(!memcmp(outb, dec, sizeof(float) * on),
                       "%s %s decode kv%d G%d hd%d keys%d window%d: %d parts, pages of %d change bits\n", variants[vi],
                       dn, s->n_kv, G, hd, s->n_keys, s->window, parts[pi], (pb_i ? &pb : &pa)->B);
            }
        free(dec);
    }
    for (int vi = 0; vi < N_VARIANTS; vi++) free(out[vi]);
    free(outb), free(ref), free(mag), free(p), free(sk), free(sv), free(keys), free(vals), free(q);
    free(pa.k), free(pb.k);
}

/* q8_0 read in place against its dequantized copy, in every variant: keys
 * [t0, t0 + T) of a column block of B tokens, and a value pass over T rows. */
static void q8_direct_case(int32_t G, int32_t hd, int32_t B, int32_t t0, int32_t T, unsigned seed) {
    const size_t rb = kvt_kv_row_bytes(KVT_KV_Q8_0, hd);
    uint8_t *cols = xcalloc((size_t)B, rb), *rows = xcalloc((size_t)T, rb), *row = xcalloc(1, rb);
    float *x = xcalloc((size_t)hd, sizeof(float)), *q = xcalloc((size_t)G * hd, sizeof(float));
    float *kdq = xcalloc((size_t)hd * B, sizeof(float)), *vdq = xcalloc((size_t)T * hd, sizeof(float));
    float *w = xcalloc((size_t)G * T, sizeof(float)), *s1 = xcalloc((size_t)G * T, sizeof(float));
    float *s2 = xcalloc((size_t)G * T, sizeof(float)), *o1 = xcalloc((size_t)G * hd, sizeof(float));
    float *o2 = xcalloc((size_t)G * hd, sizeof(float));
    for (int32_t t = 0; t < B; t++) {
        for (int32_t i = 0; i < hd; i++) x[i] = frand(&seed) * (i % 7 == 3 ? 40.0f : 1.0f); /* blocks of mixed scale */
        kvt_kv_q8_quantize_row(x, hd, row);
        kvt_kv_q8_put_column(row, hd, B, t, cols);
    }
    for (int32_t t = 0; t < T; t++) {
        for (int32_t i = 0; i < hd; i++) x[i] = frand(&seed);
        kvt_kv_q8_quantize_row(x, hd, rows + (size_t)t * rb);
    }
    for (int32_t i = 0; i < G * hd; i++) q[i] = frand(&seed);
    for (int32_t i = 0; i < G * T; i++) w[i] = frand(&seed) * 0.5f + 0.5f;
    for (int vi = 0; vi < N_VARIANTS; vi++) {
        if (!have[vi]) continue;
        kvt_ops_force_variant(variants[vi]);
        kvt_kv_q8_dequant_columns(cols, B, B, hd, kdq);
        kvt_attn_qk(q, G, hd, kdq + t0, B, 0, T, 0.125f, s1, T);
        kvt_attn_qk_q8(q, G, hd, cols, B, t0, T, 0.125f, s2, T);
        CHECKF(!memcmp(s1, s2, sizeof(float) * (size_t)G * T),
               "%s q8 qk G%d hd%d B%d t0 %d T%d: differs from dequantized\n", variants[vi], G, hd, B, t0, T);
        kvt_kv_q8_dequant_rows(rows, T, hd, vdq);
        const kvt_attn_run r1 = {vdq, w, T, t0}, r2 = {rows, w, T, t0};
        kvt_attn_av(&r1, 1, T, G, KVT_ATTN_F32, hd, NULL, NULL, o1);
        kvt_attn_av(&r2, 1, T, G, KVT_ATTN_Q8, hd, NULL, NULL, o2);
        CHECKF(!memcmp(o1, o2, sizeof(float) * (size_t)G * hd), "%s q8 av G%d hd%d T%d: differs from dequantized\n",
               variants[vi], G, hd, T);
    }
    free(cols), free(rows), free(row), free(x), free(q), free(kdq), free(vdq), free(w), free(s1), free(s2), free(o1);
    free(o2);
}

int main(void) {
    const char *dflt = kvt_ops_variant();
    char why[160];
    for (int vi = 0; vi < N_VARIANTS; vi++) {
        have[vi] = kvt_ops_force_variant(variants[vi]) == 0;
        if (!have[vi]) {
            snprintf(why, sizeof why, "this CPU (or compiler) has no %s: its attention kernels were not compared",
                     variants[vi]);
            kvt_test_skip_part(why);
        }
    }
    printf("variants run:");
    for (int vi = 0; vi < N_VARIANTS; vi++)
        if (have[vi]) printf(" %s", variants[vi]);
    printf(" (default %s)\n", dflt);

    /* G, hd, T: odd head counts and dims, one key to long runs; a prefill
     * group's 8 and 16 heads over a page of 32 keys */
    const int32_t kshapes[][3] = {{1, 64, 1},  {4, 64, 32},    {4, 64, 77},   {2, 24, 40}, {8, 128, 33}, {7, 80, 50},
                                  {1, 16, 5},  {12, 40, 19},   {3, 96, 64},   {5, 33, 17}, {9, 255, 9},  {6, 256, 130},
                                  {3, 136, 1}, {11, 200, 203}, {2, 32, 1000}, {8, 64, 32}, {16, 64, 32}, {8, 72, 31}};
    unsigned seed = 11;
    for (size_t i = 0; i < sizeof kshapes / sizeof *kshapes; i++)
        for (int f16 = 0; f16 < 2; f16++) kernel_case(kshapes[i][0], kshapes[i][1], kshapes[i][2], f16, seed++);

    /* G, hd, B, first column, keys: every head-group and key tail */
    const int32_t qshapes[][5] = {{1, 32, 16, 0, 16},  {4, 64, 32, 0, 32}, {4, 64, 32, 5, 27},    {3, 96, 32, 17, 1},
                                  {8, 128, 64, 3, 61}, {7, 256, 16, 9, 7}, {2, 64, 256, 100, 150}};
    for (size_t i = 0; i < sizeof qshapes / sizeof *qshapes; i++)
        q8_direct_case(qshapes[i][0], qshapes[i][1], qshapes[i][2], qshapes[i][3], qshapes[i][4], seed++);

    /* n_kv, G, hd, n_keys, window (0: none) */
    const paged_shape pshapes[] = {
        {1, 1, 32, 1, 0},    {2, 7, 64, 5, 0},     {3, 3, 96, 77, 0},  {1, 5, 128, 300, 100}, {2, 4, 256, 1000, 0},
        {1, 8, 64, 4100, 0}, {1, 9, 160, 130, 33}, {2, 2, 40, 70, 16}, {1, 3, 72, 65, 64},    {1, 6, 200, 17, 4},
    };
    const kvt_kv_dtype dts[] = {KVT_KV_F16, KVT_KV_F32, KVT_KV_Q8_0};
    for (size_t i = 0; i < sizeof pshapes / sizeof *pshapes; i++)
        for (size_t j = 0; j < sizeof dts / sizeof *dts; j++) {
            if (dts[j] == KVT_KV_Q8_0 && pshapes[i].hd % KVT_KV_Q8_BLOCK) continue; /* not storable as q8_0 */
            paged_case(&pshapes[i], dts[j], seed++);
        }
    kvt_ops_force_variant(dflt);
    return kvt_test_done("test_attn");
}
