// SPDX-License-Identifier: MIT
/* The weight matmul's rows per workgroup (MM_ROWS, kvt_gpu_info.mm_rows and
 * mm_rows_wide) never change a bit, on Vulkan device 0 (lavapipe here): for
 * every weight type (F32, F16, BF16 and each quantized type), matrices of 1,
 * 2, 3, 4, 5, 7, 9 and 17 rows (either side of each row count tried, and the
 * last workgroup of a matrix holding fewer rows) times batches of 1, 9 and 33
 * tokens (a decode step, and the tails of 8- and 32-token workgroups) give the
 * same bits with one row to a workgroup (KVT_VK_MM_ROWS=1), the default
 * rows, 3 rows of 16 tokens past 8 (KVT_VK_MM_TOKS=16) and 8 rows of 8
 * tokens (KVT_VK_MM_TOKS=8). Also:
 * KVT_VK_MM_ROWS outside 1..8, or more rows than the device's shared memory
 * holds, fails the open naming it. The seed is printed; $KVT_GPU_SEED replays
 * it. No validation message may appear. Skips (77) without a device. */
#include <math.h>
#include <string.h>

#include "gpu_fwd_test.h"
#include "ops.h"
#include "quant_k.h"
#include "quant_legacy.h"
#include "types.h"

static const struct {
    uint32_t type;
    const char *name;
} TYPES[] = {{KVT_TYPE_F32, "F32"},       {KVT_TYPE_F16, "F16"},   {KVT_TYPE_BF16, "BF16"}, {KVT_TYPE_Q8_0, "Q8_0"},
             {KVT_TYPE_Q4_0, "Q4_0"},     {KVT_TYPE_Q5_0, "Q5_0"}, {KVT_TYPE_Q4_1, "Q4_1"}, {KVT_TYPE_Q5_1, "Q5_1"},
             {KVT_TYPE_IQ4_NL, "IQ4_NL"}, {KVT_TYPE_Q2_K, "Q2_K"}, {KVT_TYPE_Q3_K, "Q3_K"}, {KVT_TYPE_Q4_K, "Q4_K"},
             {KVT_TYPE_Q5_K, "Q5_K"},     {KVT_TYPE_Q6_K, "Q6_K"}};
#define NTYPES (sizeof TYPES / sizeof TYPES[0])

static const uint32_t ROWS[] = {1, 2, 3, 4, 5, 7, 9, 17};
#define NROWS (sizeof ROWS / sizeof ROWS[0])
#define MAX_ROWS 17u
#define ALL_ROWS 48u /* their sum: every matrix's result side by side in one y row */
static const uint32_t TOKS[] = {1, 9, 33};
#define NTOKS (sizeof TOKS / sizeof TOKS[0])
#define MAX_TOK 33u

/* The devices: [0] one row to a workgroup (the reference), then the others. */
#define NDEV 4
static const char *const DEV_ROWS[NDEV] = {"1", NULL, "3", "8"};
static const char *const DEV_TOKS[NDEV] = {NULL, NULL, "16", "8"};

/* Opens device 0 with KVT_VK_MM_ROWS and KVT_VK_MM_TOKS as given (NULL: unset); NULL with the message kept. */
static kvt_gpu_dev *open_with(const char *rows, const char *toks) {
    if (rows) setenv("KVT_VK_MM_ROWS", rows, 1);
    if (toks) setenv("KVT_VK_MM_TOKS", toks, 1);
    kvt_gpu_dev *d = NULL;
    if (kvt_gpu_open(0, &d)) d = NULL;
    unsetenv("KVT_VK_MM_ROWS");
    unsetenv("KVT_VK_MM_TOKS");
    return d;
}

/* rows x cols of type, random (the quantized types by the CPU's quantizers), rows of *rb bytes. */
static unsigned char *make_weights(uint32_t type, uint32_t rows, uint32_t cols, size_t *rb) {
    *rb = kvt_wmat_row_bytes(type, cols);
    unsigned char *w = malloc((size_t)rows * *rb);
    float *row = malloc((size_t)cols * 4);
    for (uint32_t r = 0; r < rows; r++) {
        float scale = ldexpf(1.0f, -(int)fwd_pick(0, 6));
        for (uint32_t c = 0; c < cols; c++) row[c] = fwd_unit() * scale;
        unsigned char *o = w + (size_t)r * *rb;
        if (type == KVT_TYPE_F32) memcpy(o, row, (size_t)cols * 4);
        else if (type == KVT_TYPE_F16) kvt_f32_to_f16_row(row, (uint16_t *)(void *)o, cols);
        else if (type == KVT_TYPE_BF16)
            for (uint32_t c = 0; c < cols; c++) ((uint16_t *)(void *)o)[c] = kvt_f32_to_bf16(row[c]);
        else if (kvt_qk_is_k(type)) kvt_qk_quantize_row(type, row, cols, o);
        else kvt_ql_quantize_row(type, row, o, cols);
    }
    free(row);
    return w;
}

/* Every row count's matmul of n tokens on device d in one recording, matrix i into columns ROW_OFF[i] ..
 * of y (rows ALL_ROWS apart); 0 or a failed check. */
static int gpu_mms(kvt_gpu_dev *d, kvt_gpu_kernels *k, kvt_gpu_wmat *const *m, kvt_gpu_buf *bx, uint32_t n, float *y) {
    kvt_gpu_buf *by = fwd_buf(d, (uint64_t)n * ALL_ROWS * 4, NULL);
    int rc = by ? kvt_gpu_begin(d) : -1;
    if (!rc) {
        uint32_t off = 0;
        for (size_t ri = 0; ri < NROWS && !rc; off += ROWS[ri++])
            rc = kvt_gpu_rec_matmul(k, m[ri], by, ALL_ROWS, off, bx, n);
        rc = fwd_submit(d, rc, "matmuls");
    }
    if (!rc) rc = fwd_get(d, by, y, (uint64_t)n * ALL_ROWS * 4);
    kvt_gpu_buf_free(by);
    return rc;
}

/* Every row count and batch of one weight type on every device against device 0's bits; the number of
 * (tokens, device) cases that differ, or -1 on a failed check. */
static int check_type(kvt_gpu_dev **d, kvt_gpu_kernels **k, int ti) {
    uint32_t type = TYPES[ti].type, cols = kvt_qk_is_k(type) ? 3 * 256 : 70 * 32; /* 70 blocks: some take 2 */
    size_t rb;
    unsigned char *w = make_weights(type, MAX_ROWS, cols, &rb);
    float *x = malloc((size_t)MAX_TOK * cols * 4), *ref = malloc((size_t)MAX_TOK * ALL_ROWS * 4);
    float *y = malloc((size_t)MAX_TOK * ALL_ROWS * 4);
    for (size_t i = 0; i < (size_t)MAX_TOK * cols; i++) x[i] = fwd_unit() * ldexpf(1.0f, (int)(i / 32 % 5) - 2);
    int bad = 0;
    kvt_gpu_wmat *m[NDEV][NROWS] = {{NULL}};
    kvt_gpu_buf *bx[NDEV] = {NULL};
    for (int v = 0; v < NDEV && bad >= 0; v++) {
        for (size_t ri = 0; ri < NROWS && bad >= 0; ri++) {
            int rc = kvt_gpu_wmat_new(d[v], type, ROWS[ri], cols, w, rb, &m[v][ri]);
            CHECKF(rc == 0, "%s %ux%u: %s", TYPES[ti].name, ROWS[ri], cols, kvt_errmsg());
            if (rc) bad = -1;
        }
        if (bad >= 0 && !(bx[v] = fwd_buf(d[v], (uint64_t)MAX_TOK * cols * 4, x))) bad = -1;
    }
    for (size_t ni = 0; ni < NTOKS && bad >= 0; ni++) {
        uint32_t n = TOKS[ni];
        if (gpu_mms(d[0], k[0], m[0], bx[0], n, ref)) bad = -1;
        for (int v = 1; v < NDEV && bad >= 0; v++) {
            if (gpu_mms(d[v], k[v], m[v], bx[v], n, y)) bad = -1;
            for (uint32_t t = 0; bad >= 0 && t < n; t++) {
                uint32_t off = 0;
                for (size_t ri = 0; ri < NROWS; off += ROWS[ri++]) {
                    size_t at = (size_t)t * ALL_ROWS + off;
                    if (!memcmp(y + at, ref + at, ROWS[ri] * 4)) continue;
                    printf("  %s: %u rows x %u tokens (token %u) with %u (%u past 8 tokens) rows a workgroup differ "
                           "from one row a workgroup\n",
                           TYPES[ti].name, ROWS[ri], n, t, kvt_gpu_dev_info(d[v])->mm_rows,
                           kvt_gpu_dev_info(d[v])->mm_rows_wide);
                    bad++;
                }
            }
        }
    }
    for (int v = 0; v < NDEV; v++) {
        for (size_t ri = 0; ri < NROWS; ri++) kvt_gpu_wmat_free(m[v][ri]);
        kvt_gpu_buf_free(bx[v]);
    }
    free(w);
    free(x);
    free(ref);
    free(y);
    return bad;
}

/* Bad values of KVT_VK_MM_ROWS fail the open naming it; 8 rows of 32 tokens opens only where it fits. */
static void check_refusals(void) {
    static const char *const badv[] = {"0", "9", "two", "4x"};
    for (size_t i = 0; i < sizeof badv / sizeof badv[0]; i++) {
        kvt_gpu_dev *d = open_with(badv[i], NULL);
        CHECKF(!d && strstr(kvt_errmsg(), "KVT_VK_MM_ROWS"), "KVT_VK_MM_ROWS=%s opened: %s", badv[i], kvt_errmsg());
        kvt_gpu_close(d);
    }
    kvt_gpu_dev *d = open_with("8", "32");
    if (d) CHECK(kvt_gpu_dev_info(d)->mm_rows_wide == 8 && kvt_gpu_dev_info(d)->mm_toks == 32);
    else CHECKF(strstr(kvt_errmsg(), "KVT_VK_MM_ROWS=8") != NULL, "8 rows of 32 tokens: %s", kvt_errmsg());
    printf("gpu mm rows: 8 rows x 32 tokens %s\n", d ? "fits this device" : "is refused, naming KVT_VK_MM_ROWS");
    kvt_gpu_close(d);
}

int main(void) {
    gpu_test_start();
    fwd_seed("gpu mm rows");
    kvt_gpu_dev *d[NDEV] = {NULL};
    kvt_gpu_kernels *k[NDEV] = {NULL};
    int ok = 1;
    for (int v = 0; v < NDEV && ok; v++) {
        d[v] = open_with(DEV_ROWS[v], DEV_TOKS[v]);
        CHECKF(d[v] != NULL, "device 0 with KVT_VK_MM_ROWS=%s: %s", DEV_ROWS[v] ? DEV_ROWS[v] : "(unset)", kvt_errmsg());
        ok = d[v] && !kvt_gpu_kernels_new(d[v], &k[v]);
        if (d[v]) {
            const kvt_gpu_info *in = kvt_gpu_dev_info(d[v]);
            printf("gpu mm rows: device %d: %u rows x 8 tokens up to 8 tokens, %u rows x %u tokens beyond\n", v,
                   in->mm_rows, in->mm_rows_wide, in->mm_toks);
        }
    }
    if (ok) {
        const kvt_gpu_info *i0 = kvt_gpu_dev_info(d[0]), *i3 = kvt_gpu_dev_info(d[3]);
        CHECK(i0->mm_rows == 1 && i0->mm_rows_wide == 1);
        CHECK(kvt_gpu_dev_info(d[2])->mm_rows == 3 && kvt_gpu_dev_info(d[2])->mm_rows_wide == 3 &&
              kvt_gpu_dev_info(d[2])->mm_toks == 16);
        CHECK(i3->mm_rows == 8 && i3->mm_rows_wide == 8 && i3->mm_toks == 8);
        /* the defaults: more than one row where shared memory holds them (it does on lavapipe) */
        CHECK(kvt_gpu_dev_info(d[1])->mm_rows > 1);
        for (int ti = 0; ti < (int)NTYPES; ti++) {
            int bad = check_type(d, k, ti);
            CHECKF(bad == 0, "%s: %d cases differ from one row a workgroup (listed above)", TYPES[ti].name, bad);
        }
        check_refusals();
    }
    for (int v = 0; v < NDEV; v++) {
        kvt_gpu_kernels_free(k[v]);
        kvt_gpu_close(d[v]);
    }
    gpu_test_no_validation_messages(0);
    return kvt_test_done("test_gpu_mm_rows");
}
