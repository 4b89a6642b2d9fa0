// SPDX-License-Identifier: MIT
/* T2, the disk block store (tier_disk.h): open (the scan of the directory's
 * segments), close, the owner API and the tier interface (tier.h). The record
 * index and the events that keep the prefix index in step are disk_index.c's;
 * the writer thread is disk_writer.c, the batched reads disk_read.c, the
 * index checkpoint disk_ckpt.c; the record format is disk_record.c's, the
 * directory's files disk_dir.c's, and the maintenance walks behind `kvtier
 * cache` disk_maint.c's. */
#include "tier_disk.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <sodium.h>
#include <zstd.h>

#include "common.h"
#include "progress.h"
#include "disk_internal.h"

#define DISK_DEFAULT_SIZE (16ull << 30)
/* Reads kept in flight by one batch. */
#define READ_DEPTH 64
/* The index handle of a block that is still in the write queue. */
#define QUEUED_HANDLE UINT64_MAX

kvt_disk_params kvt_disk_default_params(void) {
    kvt_disk_params p;
    memset(&p, 0, sizeof p);
    p.size_bytes = DISK_DEFAULT_SIZE;
    p.segment_bytes = KVT_DISK_SEGMENT_DEFAULT;
    p.block_tokens = KVT_BLOCK_TOKENS_DEFAULT;
    p.codec = KVT_DISK_CODEC_RAW;
    p.queue_depth = KVT_DISK_QUEUE_DEFAULT;
    p.put_wait_ms = KVT_DISK_PUT_WAIT_MS_DEFAULT;
    p.use_io_uring = 1;
    p.use_o_direct = 1;
    p.mac = 1;
    p.checkpoint_s = KVT_DISK_CHECKPOINT_S_DEFAULT;
    p.space_retry_s = KVT_DISK_SPACE_RETRY_S_DEFAULT;
    const char *e = getenv("KVT_DISK_CHECKPOINT_S");
    if (e && *e) p.checkpoint_s = KVT_MAX(0.0, atof(e));
    return p;
}

void kvt_disk_poll(kvt_disk *d) {
    pthread_mutex_lock(&d->mu);
    kvt_disk_apply_events_locked(d);
    pthread_mutex_unlock(&d->mu);
    kvt_disk_ckpt_maybe(d);
}

/* ---- open ---------------------------------------------------------------- */

/* The damage an open finds: bad stretches in the segments, and segments cut
 * short of what the index checkpoint recorded. One line in the log says how
 * many and what the first is. */
typedef struct {
    uint64_t stretches;
    char first[320];
} open_damage;

static void damage_note(open_damage *g, const char *seg, uint64_t off, const char *why) {
    if (!g->stretches++) snprintf(g->first, sizeof g->first, "%s at byte %" PRIu64 ": %s", seg, off, why);
}

typedef struct {
    kvt_disk *d;
    disk_seg *seg;
    open_damage *dmg;
    uint64_t bad_run_end;                 /* end of the last bad 4 KiB run, to count a run once */
    uint64_t no_mac, lost_key, no_scheme; /* with MAC on: records without one, signed under a key we lack, or
                                             under a scheme not computed here */
} open_scan;

static int open_scan_fn(void *ctx, uint64_t off, uint64_t bytes, int status, const kvt_disk_record *rec,
                        const uint8_t *raw) {
    open_scan *o = ctx;
    kvt_disk *d = o->d;
    if (status == KVT_EUNSUPPORTED) {
        d->st.foreign++;
        return 0;
    }
    if (status) {
        if (off != o->bad_run_end) {
            char nm[SEG_NAME_MAX];
            kvt_disk_seg_name(nm, sizeof nm, o->seg->id);
            damage_note(o->dmg, nm, off, kvt_errmsg()); /* the scan said what is wrong */
            d->st.corrupt++;
        }
        o->bad_run_end = off + bytes;
        return 0;
    }
    if (!kvt_hash128_eq(rec->ns, d->p.ns) || rec->block_tokens != d->p.block_tokens ||
        rec->payload_bytes != d->p.payload_bytes) {
        d->st.foreign++;
        return 0;
    }
    /* With MAC on, only records whose MAC can be checked at read are indexed;
     * the MAC itself is checked when the payload is read (the scan reads
     * headers only). Without MAC every CRC-valid record is taken. */
    if (d->p.mac && (d->key_state == KEY_NONE || !kvt_disk_mac_checkable(&d->key, rec))) {
        if (!(rec->flags & KVT_DISK_FLAG_MAC)) o->no_mac++;
        else if (d->key_state == KEY_NONE || rec->key_id != d->key.id) o->lost_key++;
        else o->no_scheme++;
        d->st.foreign++;
        return 0;
    }
    /* a later copy (reinsertion) supersedes an earlier one. Open runs on the
     * owner's thread before the tier is handed out, so, as for the checkpoint's
     * records, straight into the prefix index: no event, no copy of the tokens */
    uint32_t slot = kvt_disk_rec_put(d, rec->hash, o->seg, off, (uint32_t)bytes);
    if (d->n_ev) kvt_disk_apply_events_locked(d); /* the superseded copy's removal first */
    kvt_disk_index_add(d, rec->hash, rec->parent, rec->tokens, slot);
    return 0;
}

/* The records the open scan found but cannot serve, by cause, in the log. */
static void log_scan_misses(const kvt_disk *d, uint64_t lost_key, uint64_t no_mac, uint64_t no_scheme) {
    if (lost_key)
        kvt_logk(KVT_LOG_WARN, "dir,records",
                 "cache dir %s: %" PRIu64 " records are signed with a key this directory no longer has (its key file "
                 "was lost%s): they are misses",
                 d->dir, lost_key, d->key_state == KEY_NEW ? ", so a new one was made" : "");
    if (no_mac)
        kvt_logk(KVT_LOG_INFO, "dir,records",
                 "cache dir %s: %" PRIu64 " records without a MAC (written with --kv-disk-no-mac) are misses", d->dir,
                 no_mac);
    if (no_scheme)
        kvt_logk(KVT_LOG_WARN, "dir,records",
                 "cache dir %s: %" PRIu64 " records carry a MAC of a scheme this machine cannot compute (AES-256-GCM "
                 "without AES-NI and PCLMUL, or a later build's): they are misses",
                 d->dir, no_scheme);
}

/* Opens the segments ids[0..n) into d (a link or a FIFO under a segment's
 * name is skipped, never followed or waited on) and sets start[i], where the
 * scan of the i-th opened one begins: the end of what ck (if any) covers,
 * else UINT64_MAX. A segment shorter than ck recorded it is noted in dmg. */
static void open_segments(kvt_disk *d, const uint64_t *ids, long n, const disk_ckpt *ck, uint64_t *start,
                          open_damage *dmg) {
    for (long i = 0; i < n; i++) {
        char nm[SEG_NAME_MAX];
        kvt_disk_seg_name(nm, sizeof nm, ids[i]);
        int fd = kvt_disk_file_open(d->dir_fd, d->dir, nm, O_RDONLY | (d->o_direct ? O_DIRECT : 0), 0);
        struct stat sb;
        if (fd < 0 || fstat(fd, &sb)) {
            kvt_log(KVT_LOG_WARN, "%s", fd < 0 ? kvt_errmsg() : strerror(errno));
            d->st.read_errors++;
            if (fd >= 0) close(fd);
            continue;
        }
        disk_seg *s = kvt_xcalloc(1, sizeof *s);
        s->id = ids[i];
        s->fd = fd;
        s->bytes = (uint64_t)sb.st_size;
        start[d->n_segs] = ck ? kvt_disk_ckpt_covers(ck, s->id, &sb) : UINT64_MAX;
        uint64_t recorded = ck ? kvt_disk_ckpt_recorded(ck, s->id, &sb) : 0;
        if (recorded > s->bytes) { /* its records past the end are lost: a scan from 0 finds what is left */
            char why[128];
            snprintf(why, sizeof why, "the file is %" PRIu64 " bytes but the index checkpoint recorded %" PRIu64,
                     s->bytes, recorded);
            damage_note(dmg, nm, s->bytes, why);
            d->st.corrupt++;
        }
        kvt_disk_segs_push(d, s);
    }
}

/* Opens every existing segment and indexes its records: those an index
 * checkpoint covers from it, the rest (everything appended since, and any
 * segment it does not cover) by scanning record headers. */
static int scan_dir(kvt_disk *d, int ignore_records) {
    uint64_t *ids;
    long n = kvt_disk_list_segments(d->dir_fd, d->dir, 1, &ids);
    if (n < 0) return kvt_fail((int)n, "cache dir %s: cannot list: %s", d->dir, strerror((int)-n));
    disk_ckpt ck;
    int have_ckpt = 0;
    if (!ignore_records && d->p.index) {
        int crc = kvt_disk_ckpt_load(d, &ck);
        if (crc == 0) have_ckpt = 1;
        else if (crc != KVT_ENOTFOUND)
            kvt_logk(KVT_LOG_WARN, "error", "%s: scanning every record header instead", kvt_errmsg());
    }
    uint64_t *start = kvt_xcalloc((size_t)n + 1, sizeof *start); /* per opened segment: where its scan begins */
    open_damage dmg = {0, ""};
    open_segments(d, ids, n, have_ckpt ? &ck : NULL, start, &dmg);
    if (have_ckpt) {
        d->st.checkpoint_records = kvt_disk_ckpt_apply(d, &ck, d->segs, start, d->n_segs);
        d->st.checkpoint_used = 1;
        kvt_disk_ckpt_free(&ck);
    }
    /* after a crash most of this is the scan: read ahead in batches, unless told to read header by header */
    uint8_t *buf = d->p.scan_serial ? kvt_disk_aligned_buf(SCAN_READ_BYTES) : NULL;
    kvt_disk_scan_reader *rd = d->p.scan_serial ? NULL : kvt_disk_scan_reader_new(d->rec_max, d->p.use_io_uring);
    uint64_t no_mac = 0, lost_key = 0, no_scheme = 0, total = 0;
    for (size_t i = 0; i < d->n_segs; i++) {
        if (start[i] == UINT64_MAX) start[i] = 0;
        total += d->segs[i]->bytes - start[i];
    }
    kvt_progress prog;
    char what[sizeof prog.what];
    snprintf(what, sizeof what, "disk tier %s: scanning record headers", d->dir);
    kvt_progress_begin(&prog, what, total >> 20, "MiB");
    uint64_t done = 0;
    for (size_t i = 0; i < d->n_segs && !ignore_records; i++) {
        disk_seg *s = d->segs[i];
        open_scan o = {d, s, &dmg, UINT64_MAX, 0, 0, 0};
        kvt_disk_scan_segment_from(s->fd, start[i], s->bytes, 0, NULL, rd, buf, NULL, NULL, open_scan_fn, &o);
        no_mac += o.no_mac;
        lost_key += o.lost_key;
        no_scheme += o.no_scheme;
        done += s->bytes - start[i];
        d->st.open_scanned_bytes += s->bytes - start[i];
        kvt_progress_update(&prog, done >> 20);
    }
    kvt_progress_end(&prog, done >> 20);
    if (rd) {
        kvt_disk_scan_counts c;
        kvt_disk_scan_reader_counts(rd, &c);
        d->st.open_scan_reads = c.reads;
        d->st.open_scan_read_bytes = c.bytes;
        kvt_logk(KVT_LOG_DEBUG, "dir,bytes,reads,batches,single_reads",
                 "disk tier %s: the scan read %" PRIu64 " bytes in %" PRIu64 " reads, %" PRIu64 " batches, %" PRIu64
                 " reads on their own",
                 d->dir, c.bytes, c.reads, c.batches, c.fallbacks);
        kvt_disk_scan_reader_free(rd);
    }
    log_scan_misses(d, lost_key, no_mac, no_scheme);
    if (dmg.stretches)
        kvt_logk(KVT_LOG_WARN, "dir,damaged_stretches,first_damage",
                 "cache dir %s: %" PRIu64 " damaged stretches in its segments (the first: %s): the blocks there are "
                 "misses, computed again when asked for; `kvtier cache verify --kv-disk %s` lists them",
                 d->dir, dmg.stretches, dmg.first, d->dir);
    d->next_seg_id = n ? ids[n - 1] + 1 : 0;
    free(start);
    free(buf);
    free(ids);
    return 0;
}

static void disk_free(kvt_disk *d);

/* The parameters' checks, before anything is touched (rec_max: the largest
 * record). 0, or KVT_EARG with the reason. */
static int check_params(const kvt_disk_params *p, uint64_t rec_max) {
    if (!p->dir || !*p->dir) return kvt_fail(KVT_EARG, "--kv-disk: no directory given (the path is empty)");
    if (!p->payload_bytes || p->payload_bytes > KVT_DISK_PAYLOAD_MAX)
        return kvt_fail(KVT_EARG, "disk tier: payload_bytes %zu outside 1..%llu", p->payload_bytes,
                        (unsigned long long)KVT_DISK_PAYLOAD_MAX);
    if (p->block_tokens == 0 || p->block_tokens > KVT_BLOCK_TOKENS_MAX)
        return kvt_fail(KVT_EARG, "disk tier: block size %u outside 1..%d", p->block_tokens, KVT_BLOCK_TOKENS_MAX);
    if (p->index && kvt_prefix_block_tokens(p->index) != p->block_tokens)
        return kvt_fail(KVT_EARG, "disk tier: block size %u but the index uses %u", p->block_tokens,
                        kvt_prefix_block_tokens(p->index));
    if (p->codec >= KVT_DISK_CODEC_COUNT) return kvt_fail(KVT_EARG, "disk tier: unknown codec %d", (int)p->codec);
    if (!p->queue_depth) return kvt_fail(KVT_EARG, "disk tier: queue_depth is 0");
    if (p->segment_bytes % KVT_DISK_ALIGN || p->segment_bytes < rec_max)
        return kvt_fail(KVT_EARG, "disk tier: segment size %llu must be a multiple of %d holding a %llu-byte record",
                        (unsigned long long)p->segment_bytes, KVT_DISK_ALIGN, (unsigned long long)rec_max);
    if (p->size_bytes / 2 < p->segment_bytes)
        return kvt_fail(KVT_EARG, "disk tier: size %llu must hold at least two %llu-byte segments",
                        (unsigned long long)p->size_bytes, (unsigned long long)p->segment_bytes);
    if (!(p->space_retry_s >= 0 && p->space_retry_s <= KVT_DISK_SPACE_RETRY_S_MAX))
        return kvt_fail(KVT_EARG, "disk tier: space retry interval %g s outside 0..%g", p->space_retry_s,
                        KVT_DISK_SPACE_RETRY_S_MAX);
    return 0;
}

/* Reads the directory's header and decides what its records are worth
 * (*ignore_records: another format version); rewrites the header for this
 * format and namespace when it differs and writing is possible (unlocked: the
 * lock file could not be made, so nothing is written). */
static void open_header(kvt_disk *d, const kvt_disk_params *p, int unlocked, int *ignore_records) {
    /* The header names the format of everything here: another version means
     * the existing records cannot be trusted to parse; they stay foreign (and
     * are reclaimed oldest-first) and the header is rewritten for ours. */
    uint32_t version = KVT_DISK_FORMAT_VERSION;
    kvt_hash128 hns = p->ns;
    int ours;
    int hrc = kvt_disk_read_header_at(d->dir_fd, d->dir, &version, &hns, &ours);
    int need_header = hrc != 0;
    /* damaged (adopt let only ours through): each record still proves itself (version, CRCs,
     * MAC), so the records are kept and only the header is written again */
    if (hrc == KVT_EFORMAT)
        kvt_log(KVT_LOG_WARN, "%s: the header is written anew, and the records are kept, each checked on its own",
                kvt_errmsg());
    if (hrc == 0 && version != KVT_DISK_FORMAT_VERSION) {
        kvt_logk(KVT_LOG_WARN, "dir,,format_version,build_format_version",
                 "cache dir %s was written by %s kvtier (format version %u; this build reads %d): its records are "
                 "ignored and their space reclaimed oldest first",
                 d->dir, version > KVT_DISK_FORMAT_VERSION ? "a newer" : "an older", version, KVT_DISK_FORMAT_VERSION);
        *ignore_records = 1;
        need_header = 1;
    } else if (hrc == 0 && !kvt_hash128_eq(hns, p->ns)) {
        kvt_logk(KVT_LOG_WARN, "dir,namespace_hi_hex,namespace_lo_hex",
                 "cache dir %s was last used by namespace %016" PRIx64 "%016" PRIx64
                 ": records of other namespaces (another model, KV type, block size or numerics) are misses",
                 d->dir, hns.hi, hns.lo);
        need_header = 1;
    }
    if (unlocked) {
        kvt_disk_disable_writes(d, -EROFS, "creating the lock file");
    } else if (faccessat(d->dir_fd, ".", W_OK, 0) != 0) {
        kvt_disk_disable_writes(d, -errno, "opening the directory for writing");
    } else if (need_header) {
        int wrc = kvt_disk_write_header(d->dir_fd, d->dir, p->ns);
        if (wrc) kvt_disk_disable_writes(d, wrc, "writing the header");
    }
}

/* The directory's MAC key (p->mac): read, or made when absent and writes are
 * possible (under the lock, so two openers never race to make it); no key
 * disables writes. 0, or the error that refuses the directory (a key file
 * someone else could read or have chosen). */
static int open_key(kvt_disk *d, const kvt_disk_params *p) {
    const char *scheme = getenv(MAC_SCHEME_ENV);
    if (scheme && *scheme && strcmp(scheme, MAC_SCHEME_PORTABLE))
        kvt_logk(KVT_LOG_WARN, "variable,value", "%s=%s: only '%s' means anything (for tests and benchmarks); ignored",
                 MAC_SCHEME_ENV, scheme, MAC_SCHEME_PORTABLE);
    /* the key is made under the lock, so two openers never race to make it */
    int krc = kvt_disk_key_load(d->dir_fd, d->dir, geteuid(), &d->key);
    if (krc == 0) {
        d->key_state = KEY_READ;
    } else if (krc == KVT_ENOTFOUND && !d->write_err) {
        krc = kvt_disk_key_create(d->dir_fd, d->dir, &d->key);
        if (krc == 0) d->key_state = KEY_NEW;
        else kvt_disk_disable_writes(d, krc, "creating the key file"); /* no key: nothing can be written or trusted */
    } else if (krc != KVT_ENOTFOUND) {
        return krc; /* a key someone else could read or have chosen: refuse the directory */
    }
    return 0;
}

/* Whether the directory takes O_DIRECT (d->o_direct); buffered I/O when not. */
static void probe_o_direct(kvt_disk *d) {
    int prc = kvt_disk_probe_o_direct(d->dir_fd, d->dir);
    d->o_direct = prc == 0;
    if (prc)
        kvt_logk(KVT_LOG_INFO, "dir,error", "disk tier %s: O_DIRECT not supported here (%s); using buffered I/O",
                 d->dir, strerror(-prc));
}

/* The I/O backends (io_uring or pread/pwrite, for reads and for the
 * writer) and the zstd writer's context and buffer; d->o_direct was probed. */
static void open_io(kvt_disk *d, const kvt_disk_params *p) {
    kvt_dio_new(READ_DEPTH, p->use_io_uring, &d->rio);
    kvt_dio_new(1, p->use_io_uring, &d->wio);
    if (p->use_io_uring && !kvt_dio_uses_uring(d->rio))
        kvt_logk(KVT_LOG_INFO, "dir", "disk tier %s: io_uring unavailable; using pread/pwrite", d->dir);
    d->st.io_uring = kvt_dio_uses_uring(d->rio);
    d->st.o_direct = d->o_direct;
    if (p->codec == KVT_DISK_CODEC_ZSTD) {
        d->zc = ZSTD_createCCtx();
        d->wbuf = kvt_disk_aligned_buf(d->rec_max);
    }
}

/* Long: each step of opening (the directory and its lock, the scan or the
 * checkpoint, the I/O backend, the writer) checked and undone on failure. */
int kvt_disk_open(const kvt_disk_params *p, kvt_disk **out) {
    *out = NULL;
    uint32_t hb = KVT_DISK_HEADER_FIXED + 4 * p->block_tokens;
    uint64_t rec_max = kvt_disk_align_up(hb + p->payload_bytes);
    int crc = check_params(p, rec_max);
    if (crc) return crc;

    int dfd = kvt_disk_dir_open(p->dir, DIR_CREATE);
    if (dfd < 0) return dfd;
    /* someone else's directory, or a key we would refuse: refused before the lock or any other file is written */
    int fresh, unlocked = 0, arc = kvt_disk_dir_adopt(dfd, p->dir, p->mac, &p->ns, &fresh);
    int lock_fd = arc ? arc : kvt_disk_lock_dir(dfd, p->dir, &unlocked);
    if (lock_fd < 0 && !unlocked) {
        close(dfd);
        return lock_fd;
    }

    kvt_disk *d = kvt_xcalloc(1, sizeof *d);
    d->p = *p;
    d->dir = kvt_xstrdup(p->dir);
    d->p.dir = d->dir;
    d->dir_fd = dfd;
    d->lock_fd = lock_fd;
    d->header_bytes = hb;
    d->rec_max = rec_max;
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv_idle, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&d->cv_room, &ca);
    pthread_cond_init(&d->cv_work, &ca); /* the writer's timed wait for space uses it too */
    pthread_condattr_destroy(&ca);
    d->st.budget_bytes = p->size_bytes;
    d->st.compression_ratio = 1.0;
    d->q = kvt_xcalloc(p->queue_depth, sizeof *d->q);
    d->zd = ZSTD_createDCtx();
    double t0 = kvt_now();

    int ignore_records = 0;
    open_header(d, p, unlocked, &ignore_records);
    if (p->mac) {
        int krc = open_key(d, p);
        if (krc) {
            disk_free(d);
            return krc;
        }
    }

    if (p->use_o_direct && !d->write_err) probe_o_direct(d);
    int rc = scan_dir(d, ignore_records);
    if (rc) {
        disk_free(d);
        return rc;
    }
    /* a smaller budget than last time: trim before anything is written */
    kvt_disk_reclaim_locked(d, 0, NULL, NULL, NULL, NULL);
    d->st.open_scan_seconds = kvt_now() - t0;

    open_io(d, p);
    kvt_disk_apply_events_locked(d);
    if (pthread_create(&d->writer, NULL, kvt_disk_writer_main, d)) {
        disk_free(d);
        return kvt_fail(-EAGAIN, "disk tier: cannot start the writer thread");
    }
    d->writer_started = 1;
    kvt_logk(d->map.count ? KVT_LOG_INFO : KVT_LOG_DEBUG,
             "dir,records,segments,checkpoint_records,scanned_mib,open_s,mac,let_go_records,let_go_segments",
             "disk tier %s: %zu records in %zu segments (%" PRIu64 " from the index checkpoint, %.1f MiB of headers "
             "scanned), opened in %.3f s; MAC %s; %" PRIu64 " records in %" PRIu64
             " oldest segments let go to fit the budget",
             d->dir, (size_t)d->map.count, d->n_segs, d->st.checkpoint_records,
             (double)d->st.open_scanned_bytes / 1048576.0, d->st.open_scan_seconds,
             !p->mac           ? "off"
                 : d->key.gmac ? "AES-256-GCM (GMAC)"
                               : "BLAKE2b",
             d->st.evicted, d->st.segments_reclaimed);
    d->ckpt_last = kvt_now();
    d->ckpt_mark = kvt_disk_change_count(d);
    *out = d;
    return 0;
}

static void disk_free(kvt_disk *d) {
    pthread_mutex_lock(&d->mu);
    kvt_disk_apply_events_locked(d);
    if (d->p.index)
        for (uint32_t i = 0; i < d->n_recs; i++) {
            if (i + 8 < d->n_recs) kvt_prefix_prefetch(d->p.index, d->recs[i + 8].hash); /* see disk_ckpt.c */
            if (d->recs[i].used) kvt_prefix_remove(d->p.index, d->recs[i].hash, KVT_TIER_T2);
        }
    pthread_mutex_unlock(&d->mu);
    for (size_t i = 0; i < d->n_segs; i++) {
        close(d->segs[i]->fd);
        free(d->segs[i]);
    }
    for (uint32_t i = 0; i < d->p.queue_depth; i++) free(d->q[i].buf);
    free(d->ckpt_buf);
    free(d->q);
    free(d->segs);
    free(d->recs);
    free(d->free_slots);
    free(d->ev);
    kvt_hmap128_free(&d->map);
    kvt_dio_free(d->rio);
    kvt_dio_free(d->wio);
    free(d->rbuf);
    free(d->wbuf);
    ZSTD_freeDCtx(d->zd);
    kvt_pool_free(d->rpool);
    ZSTD_freeDCtx(d->zd2);
    ZSTD_freeCCtx(d->zc);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv_work);
    pthread_cond_destroy(&d->cv_idle);
    pthread_cond_destroy(&d->cv_room);
    if (d->lock_fd >= 0) close(d->lock_fd); /* releases the flock */
    close(d->dir_fd);
    sodium_memzero(&d->key, sizeof d->key);
    free(d->dir);
    free(d);
}

void kvt_disk_note_lookup(kvt_disk *d, uint64_t blocks, uint64_t hits) {
    pthread_mutex_lock(&d->mu);
    d->lookup_blocks += blocks;
    d->lookup_hits += hits;
    pthread_mutex_unlock(&d->mu);
}

/* Adds this session's counters to the directory's lifetime file (disk_dir.c). */
static void write_lifetime(kvt_disk *d) {
    kvt_disk_lifetime s = {0};
    s.sessions = 1;
    s.lookup_blocks = d->lookup_blocks;
    s.lookup_hits = d->lookup_hits;
    s.reads = d->st.hits;
    s.read_misses = d->st.misses;
    s.records_written = d->st.puts;
    s.writes_dropped = d->st.dropped;
    s.corrupt = d->st.corrupt;
    s.bytes_read = d->st.bytes_read;
    s.bytes_written = d->st.bytes_written;
    s.evicted = d->st.evicted;
    kvt_disk_lifetime_add(d->dir_fd, d->dir, &s);
}

void kvt_disk_close(kvt_disk *d) {
    if (!d) return;
    if (d->writer_started) {
        pthread_mutex_lock(&d->mu);
        d->stop = 1;
        pthread_cond_broadcast(&d->cv_work);
        pthread_mutex_unlock(&d->mu);
        pthread_join(d->writer, NULL); /* drains the queue first */
    }
    if (d->head) fdatasync(d->head->fd);
    if (d->lock_fd >= 0) write_lifetime(d);               /* we own the directory: nobody else writes it */
    if (d->lock_fd >= 0 && !d->write_err && d->p.index) { /* the next open reads this instead of every header */
        size_t len;
        uint8_t *buf = kvt_disk_ckpt_build(d, &len);
        if (kvt_disk_ckpt_write(d->dir_fd, d->dir, buf, len)) kvt_log(KVT_LOG_WARN, "%s", kvt_errmsg());
        free(buf);
    }
    disk_free(d);
}

/* ---- owner API ---------------------------------------------------------- */

/* Waits (mu held) until the queue has a free slot or wait_ms pass. */
static void wait_for_room(kvt_disk *d) {
    if (d->q_count < d->p.queue_depth || !d->p.put_wait_ms) return;
    struct timespec until = kvt_deadline_after(d->p.put_wait_ms / 1e3);
    double t0 = kvt_now();
    d->st.put_waits++;
    while (d->q_count == d->p.queue_depth && !d->write_err)
        if (pthread_cond_timedwait(&d->cv_room, &d->mu, &until) == ETIMEDOUT) break;
    d->st.put_wait_seconds += kvt_now() - t0;
}

int kvt_disk_put(kvt_disk *d, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens, const void *payload) {
    kvt_disk_ckpt_maybe(d);
    pthread_mutex_lock(&d->mu);
    kvt_disk_apply_events_locked(d);
    int rc = 0;
    if (d->write_err) rc = KVT_EUNSUPPORTED;
    else if (kvt_hmap128_get(&d->map, hash, NULL) || kvt_disk_queued_slot(d, hash)) rc = 1;
    if (!rc) wait_for_room(d);
    if (!rc && d->write_err) rc = KVT_EUNSUPPORTED;
    else if (!rc && d->q_count == d->p.queue_depth) rc = KVT_ELIMIT;
    /* Visible from now on: the index learns of the block before it is
     * written, and reads serve it from the queue until then. All earlier
     * events were applied above, so none can undo this presence. */
    if (!rc && d->p.index && kvt_prefix_add(d->p.index, hash, parent, tokens, KVT_TIER_T2, QUEUED_HANDLE)) {
        d->st.collisions++;
        rc = -EEXIST;
    }
    if (rc == KVT_ELIMIT || rc == KVT_EUNSUPPORTED) d->st.dropped++;
    if (rc == KVT_ELIMIT && (d->st.dropped <= DROP_LOG_FIRST || d->st.dropped % DROP_LOG_EVERY == 0))
        kvt_logk(KVT_LOG_WARN, "dir,put_wait_ms,dropped",
                 "disk tier %s: the writer stayed behind for %u ms; a block was dropped (%" PRIu64 " so far)", d->dir,
                 d->p.put_wait_ms, d->st.dropped);
    if (rc == 1) d->st.dup_puts++;
    uint32_t at = (d->q_head + d->q_count) % d->p.queue_depth;
    if (!rc) {
        /* The slot past the tail is ours until q_count covers it: only this
         * (serialised) caller fills slots, the writer only drains committed
         * ones. Filled under mu so that a concurrent reader of the queue
         * (this same thread, later) sees a whole slot. */
        disk_qslot *q = &d->q[at];
        if (!q->buf) q->buf = kvt_disk_aligned_buf(d->rec_max);
        q->hash = hash;
        q->parent = parent;
        q->cancelled = 0;
        memcpy(q->buf + RH_TOKENS, tokens, d->p.block_tokens * sizeof(int32_t));
        memcpy(q->buf + d->header_bytes, payload, d->p.payload_bytes);
        d->q_count++;
        pthread_cond_signal(&d->cv_work);
    }
    pthread_mutex_unlock(&d->mu);
    return rc;
}


int kvt_disk_contains(kvt_disk *d, kvt_hash128 hash) {
    pthread_mutex_lock(&d->mu);
    kvt_disk_apply_events_locked(d);
    int in = kvt_hmap128_get(&d->map, hash, NULL) || kvt_disk_queued_slot(d, hash);
    pthread_mutex_unlock(&d->mu);
    return in;
}

int kvt_disk_remove(kvt_disk *d, kvt_hash128 hash) {
    pthread_mutex_lock(&d->mu);
    kvt_disk_apply_events_locked(d);
    uint32_t slot;
    int rc = KVT_ENOTFOUND;
    disk_qslot *q = kvt_disk_queued_slot(d, hash);
    if (kvt_hmap128_get(&d->map, hash, &slot)) {
        kvt_disk_rec_drop(d, slot);
        d->st.removes++;
        rc = 0;
    } else if (q) {
        kvt_disk_push_event(d, 0, hash, hash, 0, NULL);
        d->st.removes++;
        rc = 0;
    }
    if (q) q->cancelled = 1; /* the writer skips it */
    kvt_disk_apply_events_locked(d);
    pthread_mutex_unlock(&d->mu);
    return rc;
}

void kvt_disk_pause_writer(kvt_disk *d, int paused) {
    pthread_mutex_lock(&d->mu);
    d->paused = paused;
    pthread_cond_broadcast(&d->cv_work);
    pthread_mutex_unlock(&d->mu);
}

int kvt_disk_flush(kvt_disk *d) {
    pthread_mutex_lock(&d->mu);
    d->paused = 0; /* a flush waits for the queue: it must drain */
    pthread_cond_broadcast(&d->cv_work);
    while (d->q_count) pthread_cond_wait(&d->cv_idle, &d->mu);
    kvt_disk_apply_events_locked(d);
    int rc = d->write_err;
    pthread_mutex_unlock(&d->mu);
    /* the writer thread's own message is its thread's; say it again on the caller's */
    if (rc)
        kvt_fail(rc, "disk tier %s: a write failed (%s), so writes stopped; blocks not yet written are lost", d->dir,
                 kvt_strerror(rc));
    return rc;
}

void kvt_disk_get_stats(kvt_disk *d, kvt_disk_stats *out) {
    pthread_mutex_lock(&d->mu);
    kvt_disk_apply_events_locked(d);
    *out = d->st;
    out->bytes_used = kvt_disk_segs_bytes(d);
    out->records = d->map.count;
    out->segments = d->n_segs;
    out->queued = d->q_count;
    out->out_of_space = d->space_wait;
    out->compression_ratio = d->st.stored_out ? (double)d->st.payload_in / (double)d->st.stored_out : 1.0;
    pthread_mutex_unlock(&d->mu);
}

/* ---- the tier interface (tier.h) ---- */

static int ops_put(void *t, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens, const void *payload) {
    return kvt_disk_put(t, hash, parent, tokens, payload);
}
static size_t ops_get_many(void *t, kvt_tier_read *reqs, size_t n) { return kvt_disk_get_many(t, reqs, n); }
static int ops_contains(void *t, kvt_hash128 hash) { return kvt_disk_contains(t, hash); }
static int ops_remove(void *t, kvt_hash128 hash) { return kvt_disk_remove(t, hash); }
static int ops_flush(void *t) { return kvt_disk_flush(t); }

static void ops_stats(void *t, kvt_tier_stats *out) {
    kvt_disk_stats ds;
    kvt_disk_get_stats(t, &ds);
    *out = (kvt_tier_stats){.blocks = ds.records,
                            .bytes_used = ds.bytes_used,
                            .budget_bytes = ds.budget_bytes,
                            .block_cost = ((kvt_disk *)t)->rec_max,
                            .hits = ds.hits,
                            .misses = ds.misses,
                            .puts = ds.puts,
                            .evictions = ds.evicted,
                            .dropped = ds.dropped};
}

const kvt_tier_ops kvt_disk_tier_ops = {
    .name = "T2 disk",
    .persistent = 1,
    .measured = 1,
    .put = ops_put,
    .get_many = ops_get_many,
    .contains = ops_contains,
    .remove = ops_remove,
    .flush = ops_flush,
    .stats = ops_stats,
};
