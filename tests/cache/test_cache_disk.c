// SPDX-License-Identifier: MIT
/* The disk tier behind the cache policy: blocks demoted RAM -> disk and
 * persisted across a restart (a new cache on the same directory) are restored
 * with greedy output and logits bit-identical to a cold run; the admission
 * filter keeps once-seen blocks off the disk; restore-or-recompute reports its
 * decision; a corrupted record is a miss, never wrong KV, and so is a forged
 * one (payload zeroed or swapped, CRCs recomputed: only the MAC can tell) or
 * one whose key file is gone; a second opener of the directory gets a clear
 * error. */
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache.h"
#include "disk_forge.h"
#include "generate.h"
#include "model.h"
#include "testutil.h"

#define B 8
#define N_GEN 10

static kvt_model *model;
static int32_t n_vocab;

typedef kvt_test_gen run_out;
#define new_engine() kvt_test_engine(model, B, 40, 512)
#define run(e, c, p, n) kvt_test_generate((e), (c), (p), (n), N_GEN, NULL)
#define same kvt_test_same
#define free_out kvt_test_gen_free
#define random_tokens(t, n, seed) kvt_test_random_tokens((t), (n), n_vocab, (seed))


static kvt_cache *open_cache_mac(kvt_engine *e, const char *dir, int admit_all, kvt_restore_policy restore, int no_mac) {
    kvt_cache_params cp = kvt_cache_default_params();
    cp.disk_no_mac = no_mac;
    cp.ram_bytes = 4 * (kvt_page_bytes(e) + 2048); /* a tiny T1: blocks move on to disk */
    cp.disk_dir = dir;
    cp.disk_bytes = 64 << 20;
    /* "seen twice" over every block (no live window), or the default: all */
    cp.disk_admit = admit_all ? KVT_ADMIT_ALL : KVT_ADMIT_REUSED;
    cp.admit_live_s = 0;
    cp.restore = restore;
    kvt_cache *c = NULL;
    int rc = kvt_cache_new(e, cp, &c);
    CHECKF(rc == 0, "cache on %s: %s", dir, kvt_errmsg());
    return c;
}

static kvt_cache *open_cache(kvt_engine *e, const char *dir, int admit_all, kvt_restore_policy restore) {
    return open_cache_mac(e, dir, admit_all, restore, 0);
}

/* One process: a cache on dir runs p (restore always); returns the run, with
 * the cache's T2 corrupt count in *corrupt. */
static run_out run_once(const char *dir, const int32_t *p, int32_t n, int no_mac, uint64_t *corrupt) {
    kvt_engine *e = new_engine();
    kvt_cache *c = open_cache_mac(e, dir, 0, KVT_RESTORE_ALWAYS, no_mac);
    run_out o = run(e, c, p, n);
    kvt_cache_stats st;
    kvt_cache_get_stats(c, &st);
    *corrupt = st.t2_corrupt;
    kvt_cache_free(c);
    kvt_engine_free(e);
    return o;
}

/* Computes p into a fresh cache on dir and flushes it to disk. */
static void fill_dir(const char *dir, const int32_t *p, int32_t n) {
    kvt_engine *e = new_engine();
    kvt_cache *c = open_cache(e, dir, 0, KVT_RESTORE_ALWAYS);
    run_out o = run(e, c, p, n);
    CHECK(kvt_cache_flush(c) == 0);
    free_out(&o);
    kvt_cache_free(c);
    kvt_engine_free(e);
}

static int scheme_walk(void *ctx, const kvt_disk_walk_info *w) {
    uint64_t *by_scheme = ctx;
    if (!w->status && w->mac != KVT_DISK_MAC_NONE && w->rec.mac_scheme < 2) by_scheme[w->rec.mac_scheme]++;
    return 0;
}

/* The attack end to end: payloads zeroed or swapped with both CRCs
 * recomputed, or the key file removed: output equals a cold run and nothing
 * is restored; without the MAC the zeroed KV would be served. Run once per
 * MAC scheme (the caller sets KVT_DISK_MAC_SCHEME; tag names the run). */
static void test_forged(const int32_t *p, int32_t n, const run_out *ref, const char *tag) {
    char dir[4096];
    uint64_t corrupt;
    kvt_disk_mac_scheme scheme = kvt_disk_mac_scheme_default();
    snprintf(dir, sizeof dir, "%s/forged-zero-%s", kvt_test_tmpdir(), tag);
    fill_dir(dir, p, n);
    uint64_t by_scheme[2] = {0, 0};
    CHECK(kvt_disk_walk(dir, 0, scheme_walk, by_scheme) == 0);
    CHECKF(by_scheme[scheme] >= 14 && by_scheme[!scheme] == 0, "%s: %llu records under scheme %d, %llu under the other",
           tag, (unsigned long long)by_scheme[scheme], (int)scheme, (unsigned long long)by_scheme[!scheme]);
    CHECKF(forge_dir(dir, 0) >= 14, "forged too few records in %s", dir);
    run_out o = run_once(dir, p, n, 0, &corrupt);
    CHECK(same(&o, ref));
    CHECKF(o.res.tier_tokens[KVT_TIER_T2] == 0 && corrupt > 0, "restored %d forged tokens, %llu corrupt",
           o.res.tier_tokens[KVT_TIER_T2], (unsigned long long)corrupt);
    free_out(&o);
    /* the control: with --kv-disk-no-mac the CRCs pass and the forged KV is served */
    o = run_once(dir, p, n, 1, &corrupt);
    CHECKF(o.res.tier_tokens[KVT_TIER_T2] > 0 && !same(&o, ref), "no-MAC run restored %d tokens",
           o.res.tier_tokens[KVT_TIER_T2]);
    free_out(&o);

    snprintf(dir, sizeof dir, "%s/forged-swap-%s", kvt_test_tmpdir(), tag);
    fill_dir(dir, p, n);
    CHECK(forge_dir(dir, 1) >= 2);
    o = run_once(dir, p, n, 0, &corrupt);
    CHECK(same(&o, ref));
    CHECKF(o.res.tier_tokens[KVT_TIER_T2] < n - 1 && corrupt > 0, "restored %d swapped tokens",
           o.res.tier_tokens[KVT_TIER_T2]);
    free_out(&o);

    snprintf(dir, sizeof dir, "%s/no-key-%s", kvt_test_tmpdir(), tag);
    fill_dir(dir, p, n);
    char key[4200];
    snprintf(key, sizeof key, "%s/key", dir);
    CHECK(unlink(key) == 0);
    o = run_once(dir, p, n, 0, &corrupt);
    CHECK(same(&o, ref) && o.res.tier_tokens[KVT_TIER_T2] == 0);
    free_out(&o);
}

/* Flips one byte in the payload of every record file in dir. */
static int corrupt_records(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *en;
    int n = 0;
    while ((en = readdir(d))) {
        if (strncmp(en->d_name, "seg-", 4)) continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, en->d_name);
        int fd = open(path, O_RDWR);
        if (fd < 0) continue;
        off_t size = lseek(fd, 0, SEEK_END);
        for (off_t off = 8192; off < size; off += 65536) { /* inside payloads */
            unsigned char b;
            if (pread(fd, &b, 1, off) == 1) {
                b ^= 0x5a;
                n += pwrite(fd, &b, 1, off) == 1;
            }
        }
        close(fd);
    }
    closedir(d);
    return n;
}

int main(void) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/kvdisk", kvt_test_tmpdir());
    if (!(model = kvt_test_tiny_model("m.gguf", 600))) {
        CHECK(model != NULL);
        return kvt_test_done("test_cache_disk");
    }
    n_vocab = model->hp.n_vocab;
    unsigned seed = 5;
    int32_t p[120];
    random_tokens(p, 120, &seed);

    kvt_engine *cold_e = new_engine();
    run_out ref = run(cold_e, NULL, p, 120);
    kvt_engine_free(cold_e);

    /* process 1: compute, persist on shutdown */
    kvt_engine *e = new_engine();
    kvt_cache *c = open_cache(e, dir, 0, KVT_RESTORE_ALWAYS);
    if (!c) return kvt_test_done("test_cache_disk");
    /* a second opener of the same directory is refused, naming the problem */
    kvt_cache *c2 = NULL;
    CHECK(kvt_cache_new(e, (kvt_cache_params){.disk_dir = dir, .disk_bytes = 64 << 20}, &c2) < 0 && !c2);
    CHECKF(strstr(kvt_errmsg(), "in use") != NULL, "lock message: %s", kvt_errmsg());
    run_out first = run(e, c, p, 120);
    CHECK(same(&first, &ref));
    CHECK(kvt_cache_flush(c) == 0);
    kvt_cache_stats st;
    kvt_cache_get_stats(c, &st);
    CHECKF(st.t2_records >= 15, "%llu records on disk", (unsigned long long)st.t2_records);
    kvt_cache_free(c);
    kvt_engine_free(e);

    /* process 2: a restart finds the prefix on disk, output bit-identical */
    e = new_engine();
    c = open_cache(e, dir, 0, KVT_RESTORE_ALWAYS);
    run_out warm = run(e, c, p, 120);
    CHECKF(warm.res.tier_tokens[KVT_TIER_T2] == 119, "restored %d tokens from T2", warm.res.tier_tokens[KVT_TIER_T2]);
    CHECK(warm.res.t2_decision == KVT_T2_RESTORE);
    CHECK(same(&warm, &ref));
    kvt_cache_free(c);
    kvt_engine_free(e);

    /* restore-or-recompute: "never" recomputes and says so, same output */
    e = new_engine();
    c = open_cache(e, dir, 0, KVT_RESTORE_NEVER);
    run_out never = run(e, c, p, 120);
    CHECK(never.res.tier_tokens[KVT_TIER_T2] == 0 && never.res.t2_decision == KVT_T2_RECOMPUTE);
    CHECK(same(&never, &ref));
    kvt_cache_free(c);
    kvt_engine_free(e);

    /* corrupted records on disk: misses, never wrong KV */
    int flipped = corrupt_records(dir);
    CHECKF(flipped > 0, "no record bytes flipped in %s", dir);
    e = new_engine();
    c = open_cache(e, dir, 0, KVT_RESTORE_ALWAYS);
    run_out after = run(e, c, p, 120);
    CHECK(same(&after, &ref));
    CHECKF(after.res.tier_tokens[KVT_TIER_T2] < 119, "corrupt records were restored (%d tokens)",
           after.res.tier_tokens[KVT_TIER_T2]);
    kvt_cache_free(c);
    kvt_engine_free(e);

    /* under the scheme this CPU signs with, then under the portable one */
    test_forged(p, 120, &ref, "default");
    CHECK(setenv("KVT_DISK_MAC_SCHEME", "blake2b", 1) == 0);
    test_forged(p, 120, &ref, "blake2b");
    CHECK(unsetenv("KVT_DISK_MAC_SCHEME") == 0);

    /* admission: blocks seen once are not written when RAM evicts them */
    char dir2[4096];
    snprintf(dir2, sizeof dir2, "%s/kvdisk2", kvt_test_tmpdir());
    e = new_engine();
    c = open_cache(e, dir2, 0, KVT_RESTORE_AUTO);
    for (int k = 0; k < 6; k++) { /* distinct prompts churn T0 and T1 */
        int32_t q[100];
        random_tokens(q, 100, &seed);
        run_out o = run(e, c, q, 100);
        free_out(&o);
    }
    kvt_cache_get_stats(c, &st);
    CHECKF(st.t2_not_admitted > 0 && st.t2_demotions == 0, "not admitted %llu, written %llu",
           (unsigned long long)st.t2_not_admitted, (unsigned long long)st.t2_demotions);
    /* a block reused once is admitted on its next eviction */
    run_out a1 = run(e, c, p, 120), a2 = run(e, c, p, 120);
    for (int k = 0; k < 6; k++) {
        int32_t q[100];
        random_tokens(q, 100, &seed);
        run_out o = run(e, c, q, 100);
        free_out(&o);
    }
    kvt_cache_get_stats(c, &st);
    CHECKF(st.t2_demotions > 0, "reused blocks never reached the disk");
    CHECK(same(&a2, &ref));
    kvt_cache_free(c);
    kvt_engine_free(e);

    run_out *all[] = {&ref, &first, &warm, &never, &after, &a1, &a2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free_out(all[i]);
    kvt_model_free(model);
    return kvt_test_done("test_cache_disk");
}
