// SPDX-License-Identifier: MIT
/* The batched open scan (disk_scan.c) against the scan it replaces, one pread
 * per header: on segment files of short records (read in chunks), long ones
 * (header reads at predicted offsets) and mixed ones (sizes, block sizes,
 * codecs, namespaces, MACs and format versions changing from record to
 * record), each damaged by a seed (flipped bytes, zeroed pages, headers that
 * claim more than follows, torn tails, appended garbage), both walks must
 * report the same records, bad steps and torn tail, field by field, from any
 * start offset, with io_uring and without, O_DIRECT and buffered. Then whole
 * stores: a directory of three sessions (two payload sizes, a kill -9 with a
 * torn tail, damaged records) opens to the same index and serves the same
 * blocks either way. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <sodium.h>

#include "blockhash.h"
#include "common.h"
#include "crc32c.h"
#include "disk_internal.h"
#include "prefix.h"
#include "testutil.h"
#include "tier_disk.h"

#define SEEDS 12
#define FILE_TARGET (3u << 20)
#define SMALL_PAYLOAD 1000        /* with B = 4: 4 KiB records, read in chunks */
#define LARGE_PAYLOAD (46u << 10) /* with B = 16: 48 KiB records, read header by header */
#define MIXED_PAYLOAD_MAX (160u << 10)
#define EV_MAX 8192

static uint64_t rnd(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

/* ---- segment files ------------------------------------------------------- */

enum { KIND_SMALL, KIND_LARGE, KIND_MIXED, KIND_COUNT };
static const char *const kind_names[] = {"short records", "long records", "mixed records"};

static mac_key key;
static kvt_hash128 ns_a = {0x1111, 0xA}, ns_b = {0x2222, 0xB};

/* Appends one record to buf at *len; returns its offset. */
static uint64_t add_record(uint8_t *buf, uint64_t *len, uint32_t B, uint64_t payload, kvt_disk_codec codec,
                           kvt_hash128 ns, int mac, uint64_t *s) {
    uint64_t at = *len;
    uint8_t *r = buf + at;
    uint64_t stored = codec == KVT_DISK_CODEC_RAW ? payload : 1 + rnd(s) % payload;
    for (uint32_t t = 0; t < B; t++) {
        int32_t v = (int32_t)(rnd(s) & 0x7fffffff);
        memcpy(r + KVT_DISK_HEADER_FIXED + 4 * t, &v, 4);
    }
    for (uint64_t i = 0; i < stored; i += 8) {
        uint64_t v = rnd(s);
        memcpy(r + KVT_DISK_HEADER_FIXED + 4 * B + i, &v, KVT_MIN(8, stored - i));
    }
    kvt_hash128 h = {rnd(s), rnd(s)}, parent = {rnd(s), rnd(s)};
    *len += kvt_disk_encode_with(r, B, codec, payload, stored, ns, h, parent, mac ? &key : NULL);
    return at;
}

/* Writes a segment file of kind, damaged as seed says (seed 0: intact).
 * Returns its length. */
static uint64_t make_segment(const char *path, int kind, uint64_t seed) {
    uint8_t *buf = kvt_xcalloc(1, FILE_TARGET + (1u << 20));
    uint64_t len = 0, s = seed * 0x9E3779B97F4A7C15ull + (uint64_t)kind + 1;
    uint64_t offs[EV_MAX];
    size_t n = 0;
    uint32_t run = 0, B = 4;
    uint64_t payload = SMALL_PAYLOAD;
    kvt_disk_codec codec = KVT_DISK_CODEC_RAW;
    while (len < FILE_TARGET && n < EV_MAX) {
        kvt_hash128 ns = ns_a;
        int mac = 1;
        if (kind == KIND_LARGE) {
            B = 16;
            payload = LARGE_PAYLOAD;
        } else if (kind == KIND_MIXED) {
            if (!run) { /* runs of one shape, so that predictions sometimes hold */
                static const uint32_t bs[] = {1, 4, 16, 32, KVT_BLOCK_TOKENS_MAX};
                run = 1 + (uint32_t)(rnd(&s) % 12);
                B = bs[rnd(&s) % KVT_ARRAY_LEN(bs)];
                payload = 1 + rnd(&s) % MIXED_PAYLOAD_MAX;
                codec = rnd(&s) % 3 ? KVT_DISK_CODEC_RAW : KVT_DISK_CODEC_ZSTD;
            }
            run--;
            ns = rnd(&s) % 5 ? ns_a : ns_b;
            mac = rnd(&s) % 4 != 0;
        }
        offs[n++] = add_record(buf, &len, B, payload, codec, ns, mac, &s);
        if (kind == KIND_MIXED && rnd(&s) % 30 == 0) { /* a record of another format version */
            uint16_t v = KVT_DISK_FORMAT_VERSION - 1;
            memcpy(buf + offs[n - 1] + 4, &v, 2);
        }
    }
    if (seed) {
        int damages = 1 + (int)(rnd(&s) % 6);
        for (int k = 0; k < damages; k++) {
            uint64_t r = rnd(&s) % n, at = offs[r];
            switch (rnd(&s) % 5) {
            case 0: /* a flipped byte, in a header or a payload */
                buf[at + rnd(&s) % 600] ^= (uint8_t)(1 + rnd(&s) % 255);
                break;
            case 1: { /* zeroed pages */
                uint64_t pages = 1 + rnd(&s) % 40, from = (rnd(&s) % (len / KVT_DISK_ALIGN)) * KVT_DISK_ALIGN;
                memset(buf + from, 0, KVT_MIN(pages * KVT_DISK_ALIGN, len - from));
                break;
            }
            case 2: { /* a valid header that claims more than follows before the next record */
                uint8_t *tmp = kvt_xcalloc(1, 2u << 20);
                uint64_t tl = 0;
                add_record(tmp, &tl, 4, SMALL_PAYLOAD + (1 + rnd(&s) % 400) * 1024, KVT_DISK_CODEC_RAW, ns_a, 1, &s);
                memcpy(buf + at, tmp, KVT_DISK_HEADER_FIXED + 16);
                free(tmp);
                break;
            }
            case 3: /* garbage over a record's start */
                for (int i = 0; i < 64; i++) buf[at + (uint64_t)i] = (uint8_t)rnd(&s);
                break;
            default: /* a record's magic */ buf[at] ^= 0xFF; break;
            }
        }
        if (rnd(&s) % 2) len -= rnd(&s) % KVT_MIN(len, 200u << 10); /* a torn tail */
        else { /* garbage after the last record */ uint64_t extra = rnd(&s) % 10000;
            for (uint64_t i = 0; i < extra; i++) buf[len + i] = (uint8_t)rnd(&s);
            len += extra;
        }
    }
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(buf, 1, len, f) == len);
    if (f) fclose(f);
    free(buf);
    return len;
}

/* ---- what a walk reports -------------------------------------------------- */

typedef struct {
    uint64_t off, bytes;
    int status, verified;
    kvt_disk_record rec; /* pointers cleared */
    uint32_t tokens_crc; /* of the token ids, when the header parsed */
} scan_ev;

typedef struct {
    scan_ev *ev;
    size_t n;
} scan_log;

static int log_fn(void *ctx, uint64_t off, uint64_t bytes, int status, const kvt_disk_record *rec, const uint8_t *raw) {
    scan_log *l = ctx;
    if (l->n == EV_MAX * 2) return 1;
    scan_ev *e = &l->ev[l->n++];
    memset(e, 0, sizeof *e);
    e->off = off;
    e->bytes = bytes;
    e->status = status;
    e->verified = raw != NULL;
    e->rec = *rec;
    if (rec->tokens) e->tokens_crc = kvt_crc32c(0, rec->tokens, 4u * rec->block_tokens);
    e->rec.raw = NULL;
    e->rec.tokens = NULL;
    e->rec.stored = NULL;
    return 0;
}

static scan_log scan(int fd, uint64_t start, uint64_t size, int verify, kvt_disk_scan_reader *rd) {
    scan_log l = {kvt_xcalloc(EV_MAX * 2, sizeof(scan_ev)), 0};
    uint8_t *buf = kvt_disk_aligned_buf(SCAN_READ_BYTES), *vbuf = NULL;
    size_t vcap = 0;
    kvt_disk_scan_segment_from(fd, start, size, verify, &key, rd, buf, &vbuf, &vcap, log_fn, &l);
    free(buf);
    free(vbuf);
    return l;
}

static int same_hash(kvt_hash128 x, kvt_hash128 y) { return x.lo == y.lo && x.hi == y.hi; }

/* Field by field (a struct compare would see padding). */
static int same_ev(const scan_ev *x, const scan_ev *y) {
    const kvt_disk_record *a = &x->rec, *b = &y->rec;
    return x->off == y->off && x->bytes == y->bytes && x->status == y->status && x->verified == y->verified &&
        x->tokens_crc == y->tokens_crc && a->version == b->version && a->codec == b->codec &&
        a->block_tokens == b->block_tokens && a->header_bytes == b->header_bytes &&
        a->payload_bytes == b->payload_bytes && a->stored_bytes == b->stored_bytes &&
        a->record_bytes == b->record_bytes && same_hash(a->ns, b->ns) && same_hash(a->hash, b->hash) &&
        same_hash(a->parent, b->parent) && a->header_crc == b->header_crc && a->crc == b->crc && a->flags == b->flags &&
        a->mac_scheme == b->mac_scheme && a->key_id == b->key_id && !memcmp(a->mac, b->mac, sizeof a->mac);
}

/* 1 if both walks reported the same, event by event; the first difference is printed. */
static int same_log(const scan_log *a, const scan_log *b, const char *what) {
    size_t n = KVT_MIN(a->n, b->n);
    for (size_t i = 0; i < n; i++) {
        if (same_ev(&a->ev[i], &b->ev[i])) continue;
        fprintf(stderr, "%s: event %zu differs: off %llu/%llu bytes %llu/%llu status %d/%d\n", what, i,
                (unsigned long long)a->ev[i].off, (unsigned long long)b->ev[i].off, (unsigned long long)a->ev[i].bytes,
                (unsigned long long)b->ev[i].bytes, a->ev[i].status, b->ev[i].status);
        return 0;
    }
    if (a->n != b->n) fprintf(stderr, "%s: %zu events against %zu\n", what, a->n, b->n);
    return a->n == b->n;
}

typedef struct {
    uint64_t hint;
    int uring, direct, verify;
    uint64_t window; /* 0: the default shape */
    unsigned depth;
} reader_cfg;

/* Intact segments read through small windows: several in flight at once,
 * nothing read twice, and a verifying scan checks short records straight
 * from the windows. */
static void check_pipelined(const reader_cfg *cfg, int kind, const scan_log *got, const kvt_disk_scan_counts *cn,
                            uint64_t size, const char *what) {
    if (!cfg->window || kind == KIND_MIXED) return;
    int short_records = kind == KIND_SMALL;
    if (short_records || cfg->hint == (48u << 10))
        CHECKF(cn->fallbacks == 0, "%s: %llu fallbacks", what, (unsigned long long)cn->fallbacks);
    if (short_records) {
        CHECKF(cn->batches >= size / cfg->window, "%s: %llu windows over %llu bytes", what,
               (unsigned long long)cn->batches, (unsigned long long)size);
        CHECKF(cn->peak_windows == cfg->depth, "%s: at most %llu windows in flight, not %u", what,
               (unsigned long long)cn->peak_windows, cfg->depth);
        if (cfg->verify)
            CHECKF(cn->whole_records * 10 >= got->n * 9, "%s: %llu of %zu records checked from the windows", what,
                   (unsigned long long)cn->whole_records, got->n);
    }
}

static void test_segments(void) {
    static const reader_cfg cfgs[] = {
        {0, 1, 0, 0, 0, 0},         /* no hint: chunks first */
        {4096, 0, 1, 0, 0, 0},      /* short-record hint, preads, O_DIRECT */
        {48u << 10, 1, 1, 0, 0, 0}, /* the long records' length, O_DIRECT */
        {1u << 20, 1, 0, 0, 0, 0},  /* a hint far too long */
        {48u << 10, 1, 0, 1, 0, 0}, /* with the payload verified */
        /* small windows, so that a 3 MiB segment has many in flight, records
         * straddle their edges and damage falls in the middle of one */
        {4096, 1, 1, 0, 64u << 10, 4},       /* chunk windows, O_DIRECT */
        {0, 1, 0, 1, 64u << 10, 8},          /* chunk windows checking whole records */
        {48u << 10, 1, 1, 1, 256u << 10, 3}, /* header windows of whole records, O_DIRECT */
        {48u << 10, 0, 0, 0, 8u << 10, 2},   /* one header slot per window, preads */
        {0, 1, 1, 0, 1u << 20, 1},           /* one window at a time (the unpipelined reader) */
    };
    const char *dir = kvt_test_tmpdir();
    uint64_t records = 0, bad = 0, torn = 0, compared = 0;
    for (int kind = 0; kind < KIND_COUNT; kind++) {
        for (uint64_t seed = 0; seed < SEEDS; seed++) {
            char name[64];
            snprintf(name, sizeof name, "seg-%d-%llu", kind, (unsigned long long)seed);
            const char *path = kvt_test_path(dir, name);
            uint64_t size = make_segment(path, kind, seed);
            int fd = open(path, O_RDONLY);
            int dfd = open(path, O_RDONLY | O_DIRECT);
            if (dfd < 0) dfd = open(path, O_RDONLY); /* a filesystem without O_DIRECT */
            CHECK(fd >= 0 && dfd >= 0);
            if (fd < 0 || dfd < 0) continue;
            scan_log ref[2] = {scan(fd, 0, size, 0, NULL), scan(fd, 0, size, 1, NULL)};
            for (size_t i = 0; i < ref[0].n; i++) {
                records += ref[0].ev[i].status == 0;
                bad += ref[0].ev[i].status != 0;
                torn += ref[0].ev[i].status != 0 && ref[0].ev[i].bytes > KVT_DISK_ALIGN;
            }
            /* from the start, and from a record boundary (where a checkpoint would end) */
            uint64_t starts[2] = {0, ref[0].n > 2 ? ref[0].ev[ref[0].n / 2].off : 0};
            for (int st = 0; st < 2; st++) {
                scan_log want[2] = {ref[0], ref[1]};
                if (st) {
                    want[0] = scan(fd, starts[1], size, 0, NULL);
                    want[1] = scan(fd, starts[1], size, 1, NULL);
                }
                for (size_t c = 0; c < KVT_ARRAY_LEN(cfgs); c++) {
                    kvt_disk_scan_reader *rd = kvt_disk_scan_reader_new(cfgs[c].hint, cfgs[c].uring);
                    if (cfgs[c].window) kvt_disk_scan_reader_shape(rd, cfgs[c].window, cfgs[c].depth);
                    scan_log got = scan(cfgs[c].direct ? dfd : fd, starts[st], size, cfgs[c].verify, rd);
                    char what[160];
                    snprintf(what, sizeof what, "%s, seed %llu, start %llu, reader %zu", kind_names[kind],
                             (unsigned long long)seed, (unsigned long long)starts[st], c);
                    CHECK(same_log(&want[cfgs[c].verify], &got, what));
                    compared += got.n;
                    kvt_disk_scan_counts cn;
                    kvt_disk_scan_reader_counts(rd, &cn);
                    if (seed == 0 && st == 0) check_pipelined(&cfgs[c], kind, &got, &cn, size, what);
                    if (seed == 0 && st == 0 && cfgs[c].hint == (48u << 10) && !cfgs[c].verify && !cfgs[c].window &&
                        kind != KIND_MIXED) {
                        /* intact and predictable: batched, nothing read twice */
                        CHECKF(cn.fallbacks == 0 && cn.batches * 8 <= got.n + 8, "%s: %llu batches, %llu fallbacks",
                               what, (unsigned long long)cn.batches, (unsigned long long)cn.fallbacks);
                    }
                    free(got.ev);
                    kvt_disk_scan_reader_free(rd);
                }
                if (st) {
                    free(want[0].ev);
                    free(want[1].ev);
                }
            }
            free(ref[0].ev);
            free(ref[1].ev);
            close(fd);
            close(dfd);
            unlink(path);
        }
    }
    printf("segments: %llu records, %llu bad steps, %llu torn or overlong; %llu events compared\n",
           (unsigned long long)records, (unsigned long long)bad, (unsigned long long)torn, (unsigned long long)compared);
    CHECK(records > 1000 && bad > 100 && torn > 0);
}

/* ---- whole stores ---------------------------------------------------------- */

#define SB 4
#define PA 12000 /* 16 KiB records: chunks */
#define PB 60000 /* 64 KiB records: header reads */
#define NSTORE 300
static kvt_hash128 sroot, shash[NSTORE], sparent[NSTORE];
static int32_t stok[NSTORE][SB];

static size_t payload_of(int i) { return i >= 100 && i < 200 ? PB : PA; }

static void fill(int i, uint8_t *p) {
    uint64_t x = shash[i].lo ^ 0x9E3779B97F4A7C15ull;
    for (size_t k = 0; k < payload_of(i); k++) p[k] = (uint8_t)rnd(&x);
}

static kvt_disk_params store_params(const char *dir, size_t payload) {
    kvt_disk_params p = kvt_disk_default_params();
    p.dir = dir;
    p.payload_bytes = payload;
    p.block_tokens = SB;
    p.ns = sroot;
    p.segment_bytes = 1u << 20;
    p.size_bytes = 256u << 20;
    p.checkpoint_s = 0;
    return p;
}

static void put_blocks(kvt_disk *d, int a, int b) {
    uint8_t *pay = kvt_xmalloc(PB);
    for (int i = a; i < b; i++) {
        fill(i, pay);
        int rc;
        while ((rc = kvt_disk_put(d, shash[i], sparent[i], stok[i], pay)) == KVT_ELIMIT) kvt_disk_flush(d);
        CHECKF(rc == 0 || rc == 1, "put %d: %d", i, rc);
    }
    free(pay);
}

static void session(const char *dir, int a, int b) {
    kvt_disk_params p = store_params(dir, payload_of(a));
    kvt_disk *d;
    CHECK(kvt_disk_open(&p, &d) == 0);
    if (!d) return;
    put_blocks(d, a, b);
    CHECK(kvt_disk_flush(d) == 0);
    kvt_disk_close(d);
}

/* What one open found: its stats and, per block, indexed and served. */
typedef struct {
    kvt_disk_stats st;
    uint8_t indexed[NSTORE], served[NSTORE];
} open_result;

static open_result open_once(const char *dir, size_t payload, int serial) {
    open_result r;
    memset(&r, 0, sizeof r);
    unlink(kvt_test_path(dir, "index")); /* the previous close's: this open scans everything */
    kvt_disk_params p = store_params(dir, payload);
    p.scan_serial = serial;
    kvt_prefix *idx;
    CHECK(kvt_prefix_new(SB, &idx) == 0);
    p.index = idx;
    kvt_disk *d;
    int rc = kvt_disk_open(&p, &d);
    CHECKF(rc == 0, "open: %s", kvt_errmsg());
    if (rc) {
        kvt_prefix_free(idx);
        return r;
    }
    kvt_disk_get_stats(d, &r.st);
    uint8_t *got = kvt_xmalloc(PB), *want = kvt_xmalloc(PB);
    for (int i = 0; i < NSTORE; i++) {
        kvt_prefix_info info;
        r.indexed[i] = kvt_prefix_get(idx, shash[i], &info) == 0 && (info.tiers & KVT_TIER_BIT(KVT_TIER_T2));
        if (payload_of(i) != payload) continue;
        if (kvt_disk_get(d, shash[i], sparent[i], stok[i], got) == 0) {
            fill(i, want);
            CHECKF(!memcmp(got, want, payload), "block %d served with wrong bytes", i);
            r.served[i] = 1;
        }
    }
    free(got);
    free(want);
    kvt_disk_close(d);
    kvt_prefix_free(idx);
    return r;
}

static void flip_at(const char *path, uint64_t off) {
    int fd = open(path, O_RDWR);
    uint8_t b = 0;
    CHECK(fd >= 0 && pread(fd, &b, 1, (off_t)off) == 1);
    b ^= 0x5A;
    CHECK(pwrite(fd, &b, 1, (off_t)off) == 1);
    close(fd);
}

static void test_stores(void) {
    kvt_root_params rp = kvt_root_default_params();
    rp.block_tokens = SB;
    rp.fingerprint.lo = 91;
    kvt_block_root(&rp, &sroot);
    for (int i = 0; i < NSTORE; i++) {
        for (int t = 0; t < SB; t++) stok[i][t] = i * 37 + t * 5;
        sparent[i] = i % 10 ? shash[i - 1] : sroot;
        shash[i] = kvt_block_hash(sparent[i], stok[i], SB);
    }
    char dir[512];
    snprintf(dir, sizeof dir, "%s/store", kvt_test_tmpdir());
    session(dir, 0, 100);   /* 16 KiB records */
    session(dir, 100, 200); /* 64 KiB records: foreign to the other payload size */
    /* a third session killed -9 while writing, its tail then torn by hand */
    pid_t c = fork();
    if (c == 0) {
        kvt_disk_params p = store_params(dir, PA);
        kvt_disk *d;
        if (kvt_disk_open(&p, &d)) _exit(3);
        put_blocks(d, 200, 300);
        kvt_disk_flush(d);
        raise(SIGKILL);
        _exit(4);
    }
    int ws;
    CHECK(waitpid(c, &ws, 0) == c && WIFSIGNALED(ws));
    uint64_t *ids;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    long nseg = kvt_disk_list_segments(dfd, dir, 0, &ids);
    close(dfd);
    CHECK(nseg >= 4);
    if (nseg < 4) {
        free(ids);
        return;
    }
    char seg[1024];
    kvt_disk_seg_name(seg, sizeof seg, ids[nseg - 1]);
    const char *last = kvt_test_path(dir, seg);
    struct stat sb;
    CHECK(stat(last, &sb) == 0 && sb.st_size > 3 * 16384);
    CHECK(truncate(last, sb.st_size - 16384 / 2 - 100) == 0); /* the last record torn */
    kvt_disk_seg_name(seg, sizeof seg, ids[0]);
    flip_at(kvt_test_path(dir, seg), 3 * 16384 + 40);   /* a header: skipped at open */
    flip_at(kvt_test_path(dir, seg), 5 * 16384 + 9000); /* a payload: indexed, refused at read */
    /* zeroed pages in the middle of a record of the 64 KiB session */
    int zeroed = 0;
    for (long i = 0; i < nseg && !zeroed; i++) {
        kvt_disk_seg_name(seg, sizeof seg, ids[i]);
        int fd = open(kvt_test_path(dir, seg), O_RDWR);
        uint8_t h[SCAN_READ_BYTES];
        kvt_disk_record rec;
        if (fd >= 0 && pread(fd, h, sizeof h, 0) > 0 && kvt_disk_record_parse(h, sizeof h, 0, &rec) == 0 &&
            rec.payload_bytes == PB) {
            static const uint8_t zero[8192];
            CHECK(pwrite(fd, zero, sizeof zero, 3 * 61440 - 4096) ==
                  (ssize_t)sizeof zero); /* a payload end, the next header */
            zeroed = 1;
        }
        if (fd >= 0) close(fd);
    }
    CHECK(zeroed);
    free(ids);

    static const size_t payloads[] = {PA, PB};
    for (size_t k = 0; k < 2; k++) {
        open_result one = open_once(dir, payloads[k], 1), batched = open_once(dir, payloads[k], 0);
        CHECKF(one.st.records == batched.st.records && one.st.corrupt == batched.st.corrupt &&
                   one.st.foreign == batched.st.foreign && one.st.open_scanned_bytes == batched.st.open_scanned_bytes,
               "payload %zu: records %llu/%llu corrupt %llu/%llu foreign %llu/%llu", payloads[k],
               (unsigned long long)one.st.records, (unsigned long long)batched.st.records,
               (unsigned long long)one.st.corrupt, (unsigned long long)batched.st.corrupt,
               (unsigned long long)one.st.foreign, (unsigned long long)batched.st.foreign);
        CHECK(!memcmp(one.indexed, batched.indexed, NSTORE) && !memcmp(one.served, batched.served, NSTORE));
        CHECK(one.st.open_scan_reads == 0 && batched.st.open_scan_reads > 0);
        int served = 0;
        for (int i = 0; i < NSTORE; i++) served += batched.served[i];
        printf("store, payload %zu: %llu records, %llu corrupt, %llu foreign, %d served; one read per header and "
               "batched agree (%llu batched reads)\n",
               payloads[k], (unsigned long long)batched.st.records, (unsigned long long)batched.st.corrupt,
               (unsigned long long)batched.st.foreign, served, (unsigned long long)batched.st.open_scan_reads);
        CHECK(batched.st.corrupt >= 1 && served >= 90);
    }
}

int main(void) {
    if (sodium_init() < 0) {
        kvt_test_skip_part("libsodium cannot start");
        return kvt_test_done("test_disk_scan");
    }
    randombytes_buf(key.bytes, sizeof key.bytes);
    kvt_disk_key_prepare(&key);
    test_segments();
    test_stores();
    return kvt_test_done("test_disk_scan");
}
