// SPDX-License-Identifier: MIT
/* Kernel tests: conversions against first-principles references, matmul for
 * every weight type against a double-precision reference, batch invariance
 * (bitwise) across batch sizes, positions, thread counts and variants, and the
 * elementwise ops against naive code. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "testutil.h"

/* Matmul tolerance: |y - ref| <= MM_REL_TOL * sum_k |w_k x_k| + MM_ABS_TOL.
 * f32 accumulation over 16 lanes of <= 200 terms errs by ~(K/16 + 4) * 2^-24
 * of that sum (~1e-6); 1e-5 leaves margin yet catches any wrong term. */
#define MM_REL_TOL 1e-5
#define MM_ABS_TOL 1e-30
#define N_VARIANTS 4
static const char *const variants[N_VARIANTS] = {"scalar", "avx2", "avx512", "amx"};
static const uint32_t types[] = {KVT_TYPE_F32,  KVT_TYPE_F16,  KVT_TYPE_BF16, KVT_TYPE_Q8_0,   KVT_TYPE_Q4_0,
                                 KVT_TYPE_Q4_1, KVT_TYPE_Q5_0, KVT_TYPE_Q5_1, KVT_TYPE_IQ4_NL, KVT_TYPE_Q2_K,
                                 KVT_TYPE_Q3_K, KVT_TYPE_Q4_K, KVT_TYPE_Q5_K, KVT_TYPE_Q6_K,   KVT_TYPE_IQ4_XS};
/* the types on 256-weight super-blocks with Q8_K activations */
static int is_k(uint32_t t) { return (t >= KVT_TYPE_Q2_K && t <= KVT_TYPE_Q6_K) || t == KVT_TYPE_IQ4_XS; }
/* Whether the matmul sweeps run type t in the current Q8_0 order: in the block
 * order only Q8_0 weights sum otherwise (ops.h; every variant reads the order
 * for them alone), so the other types' bits are the lanes pass's, checked there. */
static int in_this_order(uint32_t t) { return strcmp(kvt_ops_q8_order(), "block") || t == KVT_TYPE_Q8_0; }

/* The legacy formats (quant_legacy.h), written down again here: block bytes,
 * offsets of m, qh and qs (-1: absent), the zero point, and for IQ4_NL
 * (nl) its code book (ggml's kvalues_iq4nl). */
typedef struct {
    uint32_t type;
    int bytes, m_off, qh_off, qs_off, zero, nl;
} legacy_fmt;
static const legacy_fmt legacy_fmts[] = {{KVT_TYPE_Q4_0, 18, -1, -1, 2, 8, 0},
                                         {KVT_TYPE_Q4_1, 20, 2, -1, 4, 0, 0},
                                         {KVT_TYPE_Q5_0, 22, -1, 2, 6, 16, 0},
                                         {KVT_TYPE_Q5_1, 24, 2, 4, 8, 0, 0},
                                         {KVT_TYPE_IQ4_NL, 18, -1, -1, 2, 0, 1}};
static const int iq4nl_book[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
static const legacy_fmt *legacy(uint32_t type) {
    for (size_t i = 0; i < sizeof legacy_fmts / sizeof legacy_fmts[0]; i++)
        if (legacy_fmts[i].type == type) return &legacy_fmts[i];
    return NULL;
}
/* columns for the matmul tests: the K types need multiples of 256, the other
 * quantized types whole blocks of 32 */
static int64_t test_cols(uint32_t t, int64_t plain, int64_t q8) {
    return is_k(t) ? 512 : t == KVT_TYPE_Q8_0 || legacy(t) ? q8 : plain;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd32(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}
static float rndf(void) { return (float)((double)rnd32() / 4294967296.0 * 2.0 - 1.0); } /* [-1, 1) */

static float bits_f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t f_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* ---- conversions --------------------------------------------------------- */

/* Value of a half from its fields (inf as 65536 so it orders after 65504). */
static double half_value(uint16_t h) {
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? 65536.0 : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

/* Nearest half to finite f, ties to even, found by search over the ordered
 * non-negative halves 0x0000..0x7c00 (0x7c00 = inf standing in at 65536). */
static uint16_t ref_f32_to_f16(float f) {
    double a = fabs((double)f);
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    unsigned lo = 0, hi = 0x7c00;
    if (a >= 65536.0) return sign | 0x7c00;
    while (hi - lo > 1) { /* invariant: value(lo) <= a < value(hi) */
        unsigned mid = (lo + hi) / 2;
        if (half_value((uint16_t)mid) <= a) lo = mid;
        else hi = mid;
    }
    double dl = a - half_value((uint16_t)lo), dh = half_value((uint16_t)hi) - a;
    unsigned r = dl < dh ? lo : dh < dl ? hi : (lo & 1 ? hi : lo);
    return (uint16_t)(sign | r);
}

static uint16_t ref_f32_to_bf16(float f) {
    uint32_t u = f_bits(f), t = u & 0xffff0000u;
    double a = (double)f, vl = (double)bits_f(t), vh = (double)bits_f(t + 0x10000u);
    if ((t & 0x7f800000u) == 0x7f800000u) return (uint16_t)(t >> 16); /* inf */
    if (((t + 0x10000u) & 0x7fffffffu) >= 0x7f800000u) vh = copysign(ldexp(1.0, 128), a);
    double dl = fabs(a - vl), dh = fabs(vh - a);
    uint32_t r = dl < dh ? t : dh < dl ? t + 0x10000u : ((t >> 16) & 1 ? t + 0x10000u : t);
    return (uint16_t)(r >> 16);
}

static float special_float(int i) {
    static const float sp[] = {0.0f,         -0.0f,         1.0f,          -1.0f,      65504.0f,
                               65519.99f,    65520.0f,      65536.0f,      1e-8f,      5.96e-8f,
                               2.98e-8f,     2.9802322e-8f, 6.1035156e-5f, 6.1e-5f,    1e-45f,
                               3.4e38f,      0x1.0p-24f,    0x1.8p-24f,    0x1.0p-25f, 0x1.000002p-25f,
                               0x1.ffep-15f, 0x1.002p0f,    0x1.003p0f,    0x1.001p0f, 0x1.0018p0f};
    return sp[i];
}
#define N_SPECIAL 25

static void test_conversions(void) {
    /* f16 -> f32 for every half; then back (identity except NaN payload quieting) */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = kvt_f16_to_f32((uint16_t)h);
        int e = (h >> 10) & 0x1f, m = h & 0x3ff;
        if (e == 31 && m) {
            bad += !isnan(f);
            bad += (kvt_f32_to_f16(f) & 0x7e00) != 0x7e00; /* stays a quiet NaN */
            continue;
        }
        double want = e == 31 ? ((h & 0x8000) ? -INFINITY : INFINITY) : half_value((uint16_t)h);
        bad += (double)f != want || (signbit(f) != 0) != ((h & 0x8000) != 0);
        bad += kvt_f32_to_f16(f) != h;
    }
    CHECKF(bad == 0, "%d f16 round-trip mismatches", bad);

    /* f32 -> f16 rounding vs the reference, random floats over the f16 range
     * plus values near ties, subnormals and overflow */
    bad = 0;
    for (int i = 0; i < 200000 + N_SPECIAL; i++) {
        float f;
        if (i < N_SPECIAL) f = special_float(i);
        else if (i % 3 == 0) f = bits_f((rnd32() & 0x80000000u) | (0x33000000u + rnd32() % 0x14800000u));
        else if (i % 3 == 1) /* exact ties: a half plus half an ulp */
            f = (float)((half_value((uint16_t)(rnd32() % 0x7bff)) + half_value((uint16_t)(rnd32() % 0x7bff))) * 0.5);
        else f = bits_f(rnd32());
        if (isnan(f)) continue;
        uint16_t got = kvt_f32_to_f16(f), want = ref_f32_to_f16(f);
        if (got != want && bad++ < 5) fprintf(stderr, "f16(%a) = %04x, want %04x\n", (double)f, got, want);
    }
    CHECKF(bad == 0, "%d f32->f16 rounding mismatches", bad);
    CHECK(kvt_f32_to_f16(INFINITY) == 0x7c00 && kvt_f32_to_f16(-INFINITY) == 0xfc00);
    CHECK(isnan(kvt_f16_to_f32(kvt_f32_to_f16(NAN))));
    CHECK(kvt_f32_to_f16(0x1.0p-25f) == 0x0000); /* tie to even: 0 */
    CHECK(kvt_f32_to_f16(0x1.8p-24f) == 0x0002); /* 1.5 units: tie to even 2 */
    CHECK(kvt_f32_to_f16(65520.0f) == 0x7c00);   /* overflow tie goes to inf */

    /* bf16 */
    bad = 0;
    for (int i = 0; i < 200000 + N_SPECIAL; i++) {
        float f = i < N_SPECIAL ? special_float(i) : bits_f(rnd32());
        if (i % 5 == 0) f = bits_f((f_bits(f) & 0xffff0000u) | 0x8000u); /* exact tie */
        uint16_t got = kvt_f32_to_bf16(f);
        if (isnan(f)) {
            bad += !isnan(kvt_bf16_to_f32(got));
            continue;
        }
        uint16_t want = ref_f32_to_bf16(f);
        if (got != want && bad++ < 5) fprintf(stderr, "bf16(%a) = %04x, want %04x\n", (double)f, got, want);
        bad += f_bits(kvt_bf16_to_f32(got)) != (uint32_t)got << 16;
    }
    CHECKF(bad == 0, "%d bf16 mismatches", bad);
    CHECK(kvt_f32_to_bf16(bits_f(0x3f808000u)) == 0x3f80);               /* tie, even stays */
    CHECK(kvt_f32_to_bf16(bits_f(0x3f818000u)) == 0x3f82);               /* tie, odd rounds up */
    CHECK(kvt_f32_to_bf16(bits_f(0x7f7fffffu)) == 0x7f80);               /* FLT_MAX rounds to inf */
    CHECK(isnan(kvt_bf16_to_f32(kvt_f32_to_bf16(bits_f(0x7f800001u))))); /* sNaN stays NaN */

    /* row conversions: every variant equals the scalar functions bit for bit */
    enum { NR = 1000 };
    static float xs[NR], back[NR];
    static uint16_t hs[NR], hall[65536];
    static float fall[65536];
    for (int i = 0; i < NR; i++) xs[i] = i < N_SPECIAL ? special_float(i) : bits_f(rnd32());
    xs[NR - 1] = NAN;
    for (uint32_t h = 0; h < 65536; h++) hall[h] = (uint16_t)h;
    for (int v = 0; v < N_VARIANTS; v++) {
        if (kvt_ops_force_variant(variants[v]) != 0) continue;
        for (int n = NR - 37; n <= NR; n += 37) { /* odd lengths exercise tails */
            memset(hs, 0, sizeof hs);
            kvt_f32_to_f16_row(xs, hs, n);
            int rb = 0;
            for (int i = 0; i < n; i++) rb += hs[i] != kvt_f32_to_f16(xs[i]);
            for (int i = n; i < NR; i++) rb += hs[i] != 0; /* no write past n */
            CHECKF(rb == 0, "%s: f32_to_f16_row n=%d: %d mismatches", variants[v], n, rb);
        }
        kvt_f16_to_f32_row(hall, fall, 65535);
        int rb = 0;
        for (uint32_t h = 0; h < 65535; h++) {
            float s = kvt_f16_to_f32((uint16_t)h);
            rb += memcmp(&s, &fall[h], 4) != 0;
        }
        CHECKF(rb == 0, "%s: f16_to_f32_row: %d mismatches", variants[v], rb);
        (void)back;
    }
    kvt_ops_force_variant("scalar");
}

/* ---- K-quant reference dequantization -------------------------------------
 * Written from the format's published loops, independently of quant_k.c's
 * per-weight unpack: exact values in double, and llama.cpp's f32 formula
 * ((d*sc) * q - dmin*m, each product rounded) for kvt_wmat_row_f32. */

static double hv(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return half_value(h);
}
static void k_scale_min(const uint8_t *q, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}
/* w = d*sc*q - dmin*m for 256 weights: (sc, q, m) per weight, then both forms */
static void k_ref_block(uint32_t type, const uint8_t *x, double *out, float *outf) {
    int sc[256], q[256], mn[256];
    double d = 0, dmin = 0;
    if (type == KVT_TYPE_Q2_K || type == KVT_TYPE_Q3_K) {
        const uint8_t *qs = x + (type == KVT_TYPE_Q2_K ? 16 : 32);
        int y = 0, is = 0;
        for (int n = 0; n < 256; n += 128, qs += 32)
            for (int j = 0; j < 4; j++)
                for (int half = 0; half < 2; half++, is++)
                    for (int l = 0; l < 16; l++, y++) {
                        q[y] = (qs[l + 16 * half] >> (2 * j)) & 3;
                        if (type == KVT_TYPE_Q2_K) {
                            sc[y] = x[is] & 0xF;
                            mn[y] = x[is] >> 4;
                        } else {
                            const uint8_t *s = x + 96;
                            int lo = is < 8 ? s[is] & 0xF : s[is - 8] >> 4;
                            sc[y] = (lo | (((s[8 + is % 4] >> (2 * (is / 4))) & 3) << 4)) - 32;
                            mn[y] = 0;
                            q[y] -= (x[l + 16 * half] & (1 << (4 * (n / 128) + j))) ? 0 : 4;
                        }
                    }
        d = hv(x + (type == KVT_TYPE_Q2_K ? 80 : 108));
        dmin = type == KVT_TYPE_Q2_K ? hv(x + 82) : 0;
    } else if (type == KVT_TYPE_Q4_K || type == KVT_TYPE_Q5_K) {
        const uint8_t *qs = x + (type == KVT_TYPE_Q4_K ? 16 : 48), *qh = x + 16;
        for (int j = 0, y = 0; j < 4; j++, qs += 32)
            for (int half = 0; half < 2; half++) {
                int s, m;
                k_scale_min(x + 4, 2 * j + half, &s, &m);
                for (int l = 0; l < 32; l++, y++) {
                    q[y] = (qs[l] >> (4 * half)) & 0xF;
                    if (type == KVT_TYPE_Q5_K) q[y] += (qh[l] & (1 << (2 * j + half))) ? 16 : 0;
                    sc[y] = s;
                    mn[y] = m;
                }
            }
        d = hv(x);
        dmin = hv(x + 2);
    } else if (type == KVT_TYPE_IQ4_XS) { /* d, scales_h, scales_l[4], qs[128]; sub-blocks of 32 */
        const unsigned sh = (unsigned)x[2] | (unsigned)x[3] << 8;
        for (int ib = 0; ib < 8; ib++) {
            const int ls = ((x[4 + ib / 2] >> (4 * (ib % 2))) & 15) | (((sh >> (2 * ib)) & 3) << 4);
            for (int j = 0; j < 16; j++) {
                q[32 * ib + j] = iq4nl_book[x[8 + 16 * ib + j] & 15];
                q[32 * ib + j + 16] = iq4nl_book[x[8 + 16 * ib + j] >> 4];
                sc[32 * ib + j] = sc[32 * ib + j + 16] = ls - 32;
                mn[32 * ib + j] = mn[32 * ib + j + 16] = 0;
            }
        }
        d = hv(x);
    } else {
        const uint8_t *ql = x, *qh = x + 128;
        const int8_t *s = (const int8_t *)(x + 192);
        for (int n = 0; n < 256; n += 128, ql += 64, qh += 32, s += 8)
            for (int l = 0; l < 32; l++)
                for (int k = 0; k < 4; k++) {
                    int y = n + 32 * k + l;
                    q[y] = (((ql[l + 32 * (k & 1)] >> (4 * (k >> 1))) & 0xF) | (((qh[l] >> (2 * k)) & 3) << 4)) - 32;
                    sc[y] = s[l / 16 + 2 * k];
                    mn[y] = 0;
                }
        d = hv(x + 208);
    }
    for (int i = 0; i < 256; i++) {
        out[i] = d * sc[i] * q[i] - dmin * mn[i];
        float dl = (float)d * (float)sc[i], ml = (float)dmin * (float)mn[i];
        float p = dl * (float)q[i];
        outf[i] = p - ml;
    }
}
static size_t k_block_bytes(uint32_t t) {
    return t == KVT_TYPE_Q2_K ? 84
        : t == KVT_TYPE_Q3_K  ? 110
        : t == KVT_TYPE_Q4_K  ? 144
        : t == KVT_TYPE_Q5_K  ? 176
        : t == KVT_TYPE_Q6_K  ? 210
                              : 136;
}

/* ---- matmul ---------------------------------------------------------------- */

typedef struct {
    kvt_wmat w;
    uint8_t *buf;
    double *deq;  /* rows x cols dequantized values */
    float *deqf;  /* K types: llama.cpp's f32 dequantization */
    double *mins; /* Q4_1/Q5_1: rows x (cols / 32) block minimums, else NULL */
} test_mat;

/* One random legacy block: any quants, a scale of either sign, a min. */
static void make_legacy_block(const legacy_fmt *f, uint8_t *blk, double *deq, double *min) {
    float dv = (0.01f + 0.02f * (float)(rnd32() % 100) / 100.0f) * (rnd32() & 1 ? -1.0f : 1.0f);
    uint16_t d = kvt_f32_to_f16(dv), m = kvt_f32_to_f16(rndf() * 0.5f);
    memcpy(blk, &d, 2);
    if (f->m_off >= 0) memcpy(blk + f->m_off, &m, 2);
    for (int i = 0; i < 16; i++) blk[f->qs_off + i] = (uint8_t)rnd32();
    uint32_t qh = rnd32() ^ (rnd32() << 16);
    if (f->qh_off >= 0) memcpy(blk + f->qh_off, &qh, 4);
    *min = f->m_off >= 0 ? half_value(m) : 0.0;
    for (int i = 0; i < 32; i++) {
        int nib = i < 16 ? blk[f->qs_off + i] & 15 : blk[f->qs_off + i - 16] >> 4;
        int hb = f->qh_off >= 0 ? (int)((qh >> i) & 1) : 0;
        deq[i] = half_value(d) * (f->nl ? iq4nl_book[nib] : nib + 16 * hb - f->zero) + *min;
    }
}

static void make_mat(test_mat *m, uint32_t type, int64_t rows, int64_t cols) {
    size_t rb = kvt_wmat_row_bytes(type, cols);
    m->buf = malloc(rb * (size_t)rows + 1);
    m->deq = malloc(sizeof(double) * (size_t)(rows * cols));
    m->deqf = malloc(sizeof(float) * (size_t)(rows * cols));
    m->mins = NULL;
    /* start 1 byte in: kernels must not need aligned rows */
    uint8_t *base = m->buf + 1;
    m->w = (kvt_wmat){.type = type, .rows = rows, .cols = cols, .data = base, .row_bytes = rb};
    if (is_k(type)) {
        for (int64_t r = 0; r < rows; r++)
            for (int64_t b = 0; b < cols / 256; b++) {
                /* random codes and scales (every bit pattern), then sane f16 super-scales */
                uint8_t *blk = base + (size_t)r * rb + (size_t)b * k_block_bytes(type);
                for (size_t i = 0; i < k_block_bytes(type); i++) blk[i] = (uint8_t)rnd32();
                uint16_t d = kvt_f32_to_f16(0.001f + 0.002f * (float)(rnd32() % 100) / 100.0f);
                uint16_t dm = kvt_f32_to_f16(0.002f * (float)(rnd32() % 100) / 100.0f);
                size_t dpos = type == KVT_TYPE_Q2_K ? 80
                    : type == KVT_TYPE_Q3_K         ? 108
                    : type == KVT_TYPE_Q6_K         ? 208
                                                    : 0;
                memcpy(blk + dpos, &d, 2);
                if (type == KVT_TYPE_Q2_K || type == KVT_TYPE_Q4_K || type == KVT_TYPE_Q5_K)
                    memcpy(blk + dpos + 2, &dm, 2);
                k_ref_block(type, blk, m->deq + r * cols + b * 256, m->deqf + r * cols + b * 256);
            }
        return;
    }
    const legacy_fmt *f = legacy(type);
    if (f) {
        m->mins = calloc((size_t)(rows * (cols / 32)), sizeof(double));
        for (int64_t r = 0; r < rows; r++)
            for (int64_t b = 0; b < cols / 32; b++)
                make_legacy_block(f, base + (size_t)r * rb + (size_t)b * f->bytes, m->deq + r * cols + b * 32,
                                  m->mins + r * (cols / 32) + b);
        return;
    }
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *row = base + (size_t)r * rb;
        for (int64_t k = 0; k < cols; k++) {
            float v = rndf();
            double dv;
            if (type == KVT_TYPE_F32) {
                memcpy(row + 4 * k, &v, 4);
                dv = v;
            } else if (type == KVT_TYPE_F16) {
                uint16_t h = kvt_f32_to_f16(v);
                memcpy(row + 2 * k, &h, 2);
                dv = half_value(h);
            } else if (type == KVT_TYPE_BF16) {
                uint16_t h = kvt_f32_to_bf16(v);
                memcpy(row + 2 * k, &h, 2);
                dv = (double)kvt_bf16_to_f32(h);
            } else {
                uint8_t *blk = row + (k / 32) * 34;
                if (k % 32 == 0) {
                    uint16_t d = kvt_f32_to_f16(0.01f + 0.02f * (float)(rnd32() % 100) / 100.0f);
                    memcpy(blk, &d, 2);
                }
                /* the full int8 range, -128 included */
                int8_t q = (int8_t)(rnd32() & 0xff);
                blk[2 + k % 32] = (uint8_t)q;
                uint16_t d;
                memcpy(&d, blk, 2);
                dv = half_value(d) * q;
            }
            m->deq[r * cols + k] = dv;
        }
    }
}

static void free_mat(test_mat *m) {
    free(m->buf);
    free(m->deq);
    free(m->deqf);
    free(m->mins);
}

/* The activation rounding ops.h specifies, written independently. */
static void ref_round_acts(uint32_t type, const float *x, int64_t k, double *out) {
    if (is_k(type)) { /* Q8_K: per 256, the signed value of largest magnitude maps to -127 */
        for (int64_t b = 0; b < k; b += 256) {
            float big = 0;
            for (int64_t i = b; i < b + 256; i++)
                if (fabsf(x[i]) > fabsf(big)) big = x[i];
            float is = big != 0 ? -127.0f / big : 0;
            for (int64_t i = b; i < b + 256; i++) {
                float v = is * x[i];
                out[i] = big != 0 ? (double)(1.0f / is) * fmin(127.0, nearbyint(v)) : 0.0;
            }
        }
        return;
    }
    for (int64_t b = 0; b < k; b += 32) {
        double amax = 0;
        for (int64_t i = b; i < b + 32 && i < k; i++) amax = fmax(amax, fabs((double)x[i]));
        float d = (float)amax / 127.0f, id = amax != 0 ? 127.0f / (float)amax : 0.0f;
        double dr = half_value(kvt_f32_to_f16(d));
        for (int64_t i = b; i < b + 32 && i < k; i++) {
            switch (type) {
            case KVT_TYPE_F16: out[i] = half_value(kvt_f32_to_f16(x[i])); break;
            case KVT_TYPE_BF16: out[i] = (double)kvt_bf16_to_f32(ref_f32_to_bf16(x[i])); break;
            case KVT_TYPE_F32: out[i] = x[i]; break;
            default: out[i] = dr * nearbyint(x[i] * id); break; /* Q8_0 and the legacy types: ties to even */
            }
        }
    }
}

/* Q8_1 (Q4_1/Q5_1 weights): ds[b] is how much the kernels' min term m * s
 * differs from m * (block b's exact activation sum): s = f16(d * sum q), d
 * unrounded (ops.h). */
static void ref_q8_1_sums(const float *x, int64_t k, double *ds) {
    for (int64_t b = 0; b < k; b += 32) {
        double amax = 0, qsum = 0;
        for (int64_t i = b; i < b + 32; i++) amax = fmax(amax, fabs((double)x[i]));
        float d = (float)amax / 127.0f, id = amax != 0 ? 127.0f / (float)amax : 0.0f;
        for (int64_t i = b; i < b + 32; i++) qsum += roundf(x[i] * id);
        ds[b / 32] = half_value(kvt_f32_to_f16((float)qsum * d)) - half_value(kvt_f32_to_f16(d)) * qsum;
    }
}

static int check_matmul_ref(const test_mat *m, const float *x, int64_t ldx, int64_t n, const float *y, int64_t ldy) {
    int64_t k = m->w.cols;
    double *xa = malloc(sizeof(double) * (size_t)k), ds[64] = {0};
    int bad = 0;
    for (int64_t t = 0; t < n; t++) {
        ref_round_acts(m->w.type, x + t * ldx, k, xa);
        if (m->mins) ref_q8_1_sums(x + t * ldx, k, ds);
        for (int64_t r = 0; r < m->w.rows; r++) {
            double s = 0, sa = 0;
            for (int64_t i = 0; i < k; i++) {
                s += m->deq[r * k + i] * xa[i];
                sa += fabs(m->deq[r * k + i] * xa[i]);
            }
            for (int64_t b = 0; m->mins && b < k / 32; b++) s += m->mins[r * (k / 32) + b] * ds[b];
            double err = fabs((double)y[t * ldy + r] - s);
            if (!(err <= MM_REL_TOL * sa + MM_ABS_TOL) && bad++ < 3)
                fprintf(stderr, "type %u t=%lld r=%lld: %.9g vs ref %.9g (scale %.3g)\n", m->w.type, (long long)t,
                        (long long)r, (double)y[t * ldy + r], s, sa);
        }
    }
    free(xa);
    return bad;
}

static void test_matmul_reference(kvt_pool *pool2) {
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        uint32_t type = types[ti];
        if (!in_this_order(type)) continue;
        const int64_t rows = 37, cols = test_cols(type, 83, 160); /* odd shapes (5 blocks) */
        const int64_t ldx = cols + 5, ldy = rows + 3, nmax = 70;
        test_mat m;
        make_mat(&m, type, rows, cols);
        float *x = malloc(sizeof(float) * (size_t)(nmax * ldx));
        float *y = malloc(sizeof(float) * (size_t)(nmax * ldy));
        for (int64_t i = 0; i < nmax * ldx; i++) x[i] = rndf() * 3.0f;
        for (int v = 0; v < N_VARIANTS; v++) {
            if (kvt_ops_force_variant(variants[v]) != 0) continue;
            int bad = 0;
            for (int64_t n = 1; n <= nmax; n += (v == 0 ? 7 : 1)) {
                for (int64_t i = 0; i < nmax * ldy; i++) y[i] = NAN;
                kvt_matmul(pool2, &m.w, x, ldx, n, y, ldy);
                bad += check_matmul_ref(&m, x, ldx, n, y, ldy);
                /* the stride gaps and the rows past n stay untouched */
                for (int64_t t = 0; t < nmax; t++)
                    for (int64_t r = t < n ? rows : 0; r < ldy; r++) bad += !isnan(y[t * ldy + r]);
            }
            CHECKF(bad == 0, "%s: type %u: %d elements off the reference", variants[v], type, bad);
        }
        free(x);
        free(y);
        free_mat(&m);
    }
    kvt_ops_force_variant("scalar");
}

/* The Y of token t alone (n = 1) equals its row in any batch, with any thread
 * count; and every variant gives the same bits. */
static void test_batch_invariance(kvt_pool **pools) {
    static const int64_t batches[] = {2, 7, 64, 200};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        uint32_t type = types[ti];
        if (!in_this_order(type)) continue;
        const int64_t rows = 45, cols = test_cols(type, 71, 96);
        const int64_t ntok = 210, ldx = cols + 3, ldy = rows + 1;
        test_mat m;
        make_mat(&m, type, rows, cols);
        float *x = malloc(sizeof(float) * (size_t)(ntok * ldx));
        float *single = malloc(sizeof(float) * (size_t)(ntok * rows));
        float *first = malloc(sizeof(float) * (size_t)(ntok * rows));
        float *y = malloc(sizeof(float) * (size_t)(ntok * ldy));
        for (int64_t i = 0; i < ntok * ldx; i++) x[i] = rndf() * (i % 11 == 0 ? 40.0f : 1.0f);
        int have_first = 0;
        for (int v = 0; v < N_VARIANTS; v++) {
            if (kvt_ops_force_variant(variants[v]) != 0) {
                printf("variant %s not available here\n", variants[v]);
                continue;
            }
            for (int64_t t = 0; t < ntok; t++) kvt_matmul(NULL, &m.w, x + t * ldx, ldx, 1, single + t * rows, rows);
            if (!have_first) {
                memcpy(first, single, sizeof(float) * (size_t)(ntok * rows));
                have_first = 1;
            } else {
                CHECKF(!memcmp(first, single, sizeof(float) * (size_t)(ntok * rows)),
                       "type %u: variant %s differs from %s", type, variants[v], variants[0]);
            }
            int bad = 0;
            for (int pi = 0; pi < 3; pi++)
                for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++) {
                    int64_t n = batches[bi], start = (int64_t)(bi * 3) % (ntok - n + 1);
                    kvt_matmul(pools[pi], &m.w, x + start * ldx, ldx, n, y, ldy);
                    for (int64_t t = 0; t < n; t++)
                        bad += memcmp(y + t * ldy, single + (start + t) * rows, sizeof(float) * (size_t)rows) != 0;
                }
            CHECKF(bad == 0, "%s type %u: %d token rows differ from their n=1 result", variants[v], type, bad);
        }
        free(x);
        free(single);
        free(first);
        free(y);
        free_mat(&m);
    }
    kvt_ops_force_variant("scalar");
}

/* kvt_matmul_multi: each matrix's Y bit for bit as its own kvt_matmul, for
 * any thread count; a trailing matrix of another type runs as its own group. */
static void test_matmul_multi(kvt_pool **pools) {
    static const int64_t rows[4] = {40, 7, 33, 18}, ns[] = {1, 4, 19};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const uint32_t type = types[ti], other = type == KVT_TYPE_F16 ? KVT_TYPE_F32 : KVT_TYPE_F16;
        if (!in_this_order(type)) continue;
        const int64_t cols = test_cols(type, 70, 96), ldx = cols + 2, nmax = 19;
        test_mat m[4];
        const kvt_wmat *ws[4];
        float *ref[4], *got[4];
        int64_t ld[4];
        for (int i = 0; i < 4; i++) {
            make_mat(&m[i], i < 3 ? type : other, rows[i], cols);
            ws[i] = &m[i].w;
            ld[i] = rows[i] + i;
            ref[i] = malloc(sizeof(float) * (size_t)(nmax * ld[i]));
            got[i] = malloc(sizeof(float) * (size_t)(nmax * ld[i]));
        }
        float *x = malloc(sizeof(float) * (size_t)(nmax * ldx));
        for (int64_t i = 0; i < nmax * ldx; i++) x[i] = rndf() * 2.0f;
        for (int v = 0; v < N_VARIANTS; v++) {
            if (kvt_ops_force_variant(variants[v]) != 0) continue;
            int bad = 0;
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
                for (int pi = 0; pi < 3; pi++) {
                    const int64_t n = ns[ni];
                    for (int i = 0; i < 4; i++) {
                        for (int64_t e = 0; e < nmax * ld[i]; e++) ref[i][e] = got[i][e] = -1.0f;
                        kvt_matmul(pools[0], ws[i], x, ldx, n, ref[i], ld[i]);
                    }
                    kvt_matmul_multi(pools[pi], ws, 4, x, ldx, n, got, ld);
                    for (int i = 0; i < 4; i++)
                        bad += memcmp(ref[i], got[i], sizeof(float) * (size_t)(nmax * ld[i])) != 0;
                }
            CHECKF(bad == 0, "%s type %u: %d multi matmuls differ from single ones", variants[v], type, bad);
        }
        for (int i = 0; i < 4; i++) {
            free_mat(&m[i]);
            free(ref[i]);
            free(got[i]);
        }
        free(x);
    }
    kvt_ops_force_variant("scalar");
}

/* The activation quantization's edges, through the matmuls of the types that
 * use Q8_0, Q8_1 and Q8_K activations: exact ties (amax 127, so x * 127/amax is x;
 * for Q8_K +127 and -127 in one super-block, the first deciding the sign),
 * zero, tiny and large blocks, NaN inputs (quantized to q = 0, so a Q8_0
 * Y stays finite). Every variant gives the scalar bits; NaN-free, the reference. */
static void test_quantize_edges(kvt_pool *pool2) {
    static const uint32_t qtypes[] = {KVT_TYPE_Q8_0, KVT_TYPE_Q4_1, KVT_TYPE_Q5_0, KVT_TYPE_Q4_K, KVT_TYPE_Q6_K};
    enum { ROWS = 21, COLS = 512, NTOK = 3 };
    static float x[NTOK * COLS], y0[NTOK * ROWS], y1[NTOK * ROWS];
    for (int with_nan = 0; with_nan < 2; with_nan++) {
        for (int t = 0; t < NTOK; t++) {
            float *xt = x + t * COLS;
            for (int i = 0; i < COLS; i++) xt[i] = rndf() * 5.0f;
            for (int i = 0; i < 32; i++) xt[i] = i == 0 ? 127.0f : (float)(i - 16 + t) + 0.5f; /* ties */
            for (int i = 32; i < 64; i++) xt[i] = i == 32 ? -127.0f : -(float)(i - 40) - 0.5f;
            for (int i = 64; i < 96; i++) xt[i] = 0.0f;
            for (int i = 96; i < 128; i++) xt[i] *= 1e-30f;
            for (int i = 128; i < 160; i++) xt[i] *= 100.0f; /* Q8_1: s = d * sum(q) stays under the f16 max */
            if (with_nan) xt[189 + t] = NAN; /* last lanes of a block: where a max that let NaN through would keep it */
            for (int i = 256; i < 512; i++) xt[i] = i < 300 ? 0.0f : rndf() * 3.0f; /* a second super-block */
            xt[298 + t] = -9.0f, xt[301] = 9.0f; /* Q8_K: the first of equal magnitudes (one vector) gives the sign */
        }
        for (size_t ti = 0; ti < sizeof qtypes / sizeof qtypes[0]; ti++) {
            /* a NaN makes a Q8_1 block's sum s = d * sum(q) non-finite (in llama.cpp too) */
            if (with_nan && qtypes[ti] == KVT_TYPE_Q4_1) continue;
            if (!in_this_order(qtypes[ti])) continue;
            test_mat m;
            make_mat(&m, qtypes[ti], ROWS, COLS);
            for (int v = 0; v < N_VARIANTS; v++) {
                if (kvt_ops_force_variant(variants[v]) != 0) continue;
                kvt_matmul(pool2, &m.w, x, COLS, NTOK, v == 0 ? y0 : y1, ROWS);
                if (v == 0 && !with_nan)
                    CHECKF(check_matmul_ref(&m, x, COLS, NTOK, y0, ROWS) == 0, "type %u: edges off the reference",
                           qtypes[ti]);
                int finite = 1;
                for (int i = 0; i < NTOK * ROWS; i++) finite &= isfinite(y0[i]) != 0;
                CHECKF(finite, "type %u: a NaN input left a non-finite output", qtypes[ti]);
                if (v > 0)
                    CHECKF(!memcmp(y0, y1, sizeof y0), "%s type %u: quantization edges differ from scalar (nan %d)",
                           variants[v], qtypes[ti], with_nan);
            }
            free_mat(&m);
        }
    }
    kvt_ops_force_variant("scalar");
}

static void test_wmat_row(void) {
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        test_mat m;
        const int64_t cols = is_k(types[ti]) ? 512 : 64;
        make_mat(&m, types[ti], 5, cols);
        float out[512];
        int bad = 0;
        for (int64_t r = 0; r < 5; r++) {
            kvt_wmat_row_f32(&m.w, r, out);
            for (int k = 0; k < cols; k++)
                bad += out[k] != (is_k(types[ti]) ? m.deqf[r * cols + k] : (float)m.deq[r * cols + k]);
        }
        CHECKF(bad == 0, "wmat_row_f32 type %u: %d wrong", types[ti], bad);
        free_mat(&m);
    }
}

/* ---- elementwise ------------------------------------------------------------ */

/* kvt_rmsnorm_rows (4 rows side by side, then the rest) gives each row the
 * bits of kvt_rmsnorm on it alone: 1-9 rows, odd and tiny widths, in place too. */
static void test_rmsnorm_rows(void) {
    enum { ROWS = 9, W = 67 };
    static float x[ROWS * W], wt[W], got[ROWS * W], inpl[ROWS * W], want[ROWS * W];
    for (int i = 0; i < ROWS * W; i++) x[i] = rndf() * 3;
    for (int i = 0; i < W; i++) wt[i] = 1.0f + rndf() * 0.5f;
    static const int widths[] = {1, 3, 16, 64, 67};
    int bad = 0;
    for (int rows = 1; rows <= ROWS; rows++)
        for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++) {
            const int n = widths[wi];
            for (int r = 0; r < rows; r++) kvt_rmsnorm(want + r * n, x + r * n, wt, n, 1e-6f);
            kvt_rmsnorm_rows(got, x, wt, rows, n, 1e-6f);
            memcpy(inpl, x, sizeof(float) * (size_t)(rows * n));
            kvt_rmsnorm_rows(inpl, inpl, wt, rows, n, 1e-6f);
            for (int i = 0; i < rows * n; i++) bad += got[i] != want[i] || inpl[i] != want[i];
        }
    CHECKF(bad == 0, "rmsnorm_rows: %d elements differ from kvt_rmsnorm", bad);
}

static void test_elementwise(void) {
    enum { N = 1000 };
    static float a[N], b[N], y0[N], y1[N], out[N], wt[N];
    static uint16_t bh[N];
    float ref_dot[N_VARIANTS] = {0}, ref_soft[N_VARIANTS][8] = {{0}};
    for (int i = 0; i < N; i++) {
        a[i] = rndf() * 4;
        b[i] = rndf() * 4;
        wt[i] = 1.0f + rndf() * 0.5f;
        bh[i] = kvt_f32_to_f16(b[i]);
    }
    /* exp: accurate, 0 below the range, finite above */
    double maxrel = 0;
    for (int i = 0; i <= 20000; i++) {
        float xv = -87.0f + 175.0f * (float)i / 20000.0f;
        double rel = fabs(kvt_expf(xv) / exp((double)xv) - 1.0);
        if (rel > maxrel) maxrel = rel;
    }
    CHECKF(maxrel < 1e-6, "kvt_expf max rel err %g", maxrel);
    CHECK(kvt_expf(-INFINITY) == 0.0f && kvt_expf(-100.0f) == 0.0f && kvt_expf(0.0f) == 1.0f);
    CHECK(isfinite(kvt_expf(1000.0f)));

    for (int v = 0; v < N_VARIANTS; v++) {
        if (kvt_ops_force_variant(variants[v]) != 0) continue;
        const int n = N - 3; /* odd, and the same for every variant (bits compared) */
        double sd = 0, sdh = 0, sa = 0;
        for (int i = 0; i < n; i++) {
            sd += (double)a[i] * b[i];
            sdh += (double)a[i] * half_value(bh[i]);
            sa += fabs((double)a[i] * b[i]);
        }
        float d = kvt_dot_f32(a, b, n), dh = kvt_dot_f32_f16(a, bh, n);
        CHECKF(fabs(d - sd) <= 1e-5 * sa, "%s dot %g vs %g", variants[v], d, sd);
        CHECKF(fabs(dh - sdh) <= 1e-5 * sa, "%s dot_f16 %g vs %g", variants[v], dh, sdh);
        ref_dot[v] = d + dh;
        if (v > 0 && ref_dot[0] != 0) CHECKF(ref_dot[v] == ref_dot[0], "%s dot bits differ from scalar", variants[v]);

        /* axpy: one fused rounding per element, exactly */
        memcpy(y0, b, sizeof b);
        memcpy(y1, b, sizeof b);
        kvt_axpy_f32(y0, 0.37f, a, n);
        kvt_axpy_f16(y1, -1.25f, bh, n);
        int bad = 0;
        for (int i = 0; i < N; i++) {
            float e0 = i < n ? fmaf(0.37f, a[i], b[i]) : b[i];
            float e1 = i < n ? fmaf(-1.25f, kvt_f16_to_f32(bh[i]), b[i]) : b[i];
            bad += y0[i] != e0 || y1[i] != e1;
        }
        CHECKF(bad == 0, "%s axpy: %d wrong", variants[v], bad);

        /* rmsnorm, in place too */
        double ss = 0;
        for (int i = 0; i < n; i++) ss += (double)a[i] * a[i];
        double sc = 1.0 / sqrt(ss / n + 1e-5);
        kvt_rmsnorm(out, a, wt, n, 1e-5f);
        memcpy(y0, a, sizeof a);
        kvt_rmsnorm(y0, y0, wt, n, 1e-5f);
        bad = 0;
        for (int i = 0; i < n; i++) {
            bad += fabs(out[i] - a[i] * sc * wt[i]) > 1e-5 * fabs(a[i] * sc * wt[i]) + 1e-7;
            bad += out[i] != y0[i];
        }
        CHECKF(bad == 0, "%s rmsnorm: %d wrong", variants[v], bad);

        /* silu_mul */
        memcpy(y0, a, sizeof a);
        y0[0] = -200.0f;
        y0[1] = 200.0f;
        kvt_silu_mul(y0, b, n);
        bad = 0;
        for (int i = 0; i < n; i++) {
            double g = i == 0 ? -200.0 : i == 1 ? 200.0 : a[i];
            double e = g / (1.0 + exp(-g)) * b[i];
            bad += !(fabs(y0[i] - e) <= 1e-6 * fabs(e) + 1e-30);
        }
        CHECKF(bad == 0, "%s silu_mul: %d wrong", variants[v], bad);

        /* softmax over lengths that end mid-vector; -inf scores get exactly 0 */
        for (int len = 1; len <= 40; len += 13) {
            for (int i = 0; i < len; i++) y0[i] = a[i] * 10;
            if (len > 3) y0[2] = -INFINITY;
            double mx = -INFINITY, sum = 0;
            for (int i = 0; i < len; i++) mx = fmax(mx, y0[i]);
            for (int i = 0; i < len; i++) sum += exp(y0[i] - mx);
            memcpy(y1, y0, sizeof(float) * (size_t)len);
            kvt_softmax(y1, len);
            bad = 0;
            double tot = 0;
            for (int i = 0; i < len; i++) {
                double e = exp(y0[i] - mx) / sum;
                bad += !(fabs(y1[i] - e) <= 1e-6 * e + 1e-9);
                tot += y1[i];
            }
            if (len > 3) bad += y1[2] != 0.0f;
            CHECKF(bad == 0 && fabs(tot - 1) < 1e-5, "%s softmax len %d: %d wrong", variants[v], len, bad);
            ref_soft[v][len % 8] = y1[len - 1];
            if (v > 0 && ref_soft[0][len % 8] != 0)
                CHECKF(ref_soft[v][len % 8] == ref_soft[0][len % 8], "%s softmax bits differ", variants[v]);
        }
        /* long softmax bits equal the scalar variant's */
        static float s0[N], s1[N];
        for (int i = 0; i < N; i++) s0[i] = a[i] * 7;
        memcpy(s1, s0, sizeof s0);
        kvt_softmax(s1, N - 5);
        kvt_ops_force_variant("scalar");
        kvt_softmax(s0, N - 5);
        kvt_silu_mul(memcpy(y0, a, sizeof a), b, n);
        kvt_ops_force_variant(variants[v]);
        kvt_silu_mul(memcpy(y1, a, sizeof a), b, n);
        CHECKF(!memcmp(s0, s1, sizeof s0), "%s softmax differs from scalar", variants[v]);
        CHECKF(!memcmp(y0, y1, sizeof y0), "%s silu differs from scalar", variants[v]);
        /* and from any first position (a window's start: its lanes are keyed by position), with
         * chunks that start, end or lie whole inside the row */
        static const int firsts[] = {0, 1, 15, 16, 37}, lens[] = {1, 15, 16, 17, 33, 100};
        for (size_t fi = 0; fi < sizeof firsts / sizeof *firsts; fi++)
            for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
                const int len = lens[li];
                for (int i = 0; i < len; i++) s0[i] = s1[i] = a[(i * 7) % n] * 9;
                kvt_softmax_at(s1, len, firsts[fi]);
                kvt_ops_force_variant("scalar");
                kvt_softmax_at(s0, len, firsts[fi]);
                kvt_ops_force_variant(variants[v]);
                CHECKF(!memcmp(s0, s1, sizeof(float) * (size_t)len), "%s softmax from %d, %d long, differs from scalar",
                       variants[v], firsts[fi], len);
                /* the f16-rounded weights: the softmax's bits, each rounded to f16 and back, in every variant */
                static float r0[N], r1[N];
                static uint16_t h[N];
                for (int i = 0; i < len; i++) r1[i] = a[(i * 7) % n] * 9;
                kvt_softmax_at_f16(r1, len, firsts[fi]);
                kvt_f32_to_f16_row(s0, h, len);
                kvt_f16_to_f32_row(h, r0, len);
                CHECKF(!memcmp(r0, r1, sizeof(float) * (size_t)len),
                       "%s f16 softmax from %d, %d long, is not the rounded softmax", variants[v], firsts[fi], len);
            }

        memcpy(y0, b, sizeof b);
        kvt_add(y0, a, n);
        bad = 0;
        for (int i = 0; i < N; i++) bad += y0[i] != (i < n ? b[i] + a[i] : b[i]);
        CHECKF(bad == 0, "%s add: %d wrong", variants[v], bad);
    }
    kvt_ops_force_variant("scalar");
}

int main(void) {
    printf("numerics %s, default variant %s\n", kvt_ops_numerics_id(), kvt_ops_variant());
    CHECK(kvt_ops_force_variant("no-such-variant") == -1);
    CHECK(kvt_ops_force_variant("scalar") == 0 && !strcmp(kvt_ops_variant(), "scalar"));
    kvt_pool *pools[3] = {kvt_pool_new(1), kvt_pool_new(2), kvt_pool_new(3)};
    CHECK(pools[0] && pools[1] && pools[2]);
    CHECK(kvt_pool_threads(pools[2]) == 3);
    test_conversions();
    test_wmat_row();
    test_elementwise();
    test_rmsnorm_rows();
    /* both Q8_0 orders (ops.h): every variant against scalar and the references in each */
    static const char *const q8_orders[] = {"lanes", "block"};
    CHECK(kvt_ops_set_q8_order("no-such-order") == -1);
    for (int o = 0; o < 2; o++) {
        CHECK(kvt_ops_set_q8_order(q8_orders[o]) == 0 && !strcmp(kvt_ops_q8_order(), q8_orders[o]));
        test_matmul_reference(pools[1]);
        test_batch_invariance(pools);
        test_matmul_multi(pools);
        test_quantize_edges(pools[1]);
    }
    CHECK(strcmp(kvt_ops_numerics_id(), "kvt-ops-l16-v3-q8b") == 0);
    CHECK(kvt_ops_set_q8_order("lanes") == 0 && strcmp(kvt_ops_numerics_id(), "kvt-ops-l16-v3") == 0);
    for (int i = 0; i < 3; i++) kvt_pool_free(pools[i]);
    return kvt_test_done("test_ops");
}
