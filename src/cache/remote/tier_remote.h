// SPDX-License-Identifier: MIT
/* T3, the shared remote tier (docs/design.md "The tiers"): KV blocks in a Redis (or
 * Valkey) server that many kvtier nodes read and write, so a fleet computes
 * each shared prefix once. Implements the tier interface (tier.h) with
 * persistent = 1, measured = 1 and shared = 1.
 *
 * Values. One block is one Redis string under the key
 *     kvt:<namespace, 32 hex digits>:<block hash, 32 hex digits>
 * (hash.hi then hash.lo, as `kvtier cache stats` prints them) whose value is
 * the disk tier's self-verifying record (tier_disk.h "Record", written with
 * its "records for other tiers") without its 4 KiB padding: header with namespace, hash,
 * parent, B token ids, lengths, CRCs and a keyed MAC, then the payload. The
 * namespace is the cache's unsalted root (model fingerprint, KV layout and
 * dtype, B, numerics); tenants are apart because their salted block keys
 * differ. A value is served only if it parses, its CRC holds, its MAC
 * verifies under the key file's key, and its namespace, hash, parent and
 * token ids equal the block asked for: anything else (another model or
 * tenant, a truncated or altered value, another writer's key) is a miss,
 * counted in `bad`, never wrong KV.
 *
 * Key file. The MAC is mandatory here, because every process that can reach
 * the Redis server can write values: params.key_file must name a regular file
 * of exactly KVT_DISK_KEY_BYTES bytes, owned by this user, mode 0600 (no
 * group or other bits); kvt_remote_open refuses anything else, and refuses to
 * start without one. All nodes of a fleet share that file.
 *
 * Reads never block a request on a silent Redis beyond params.timeout_ms:
 * get_many and probe send their commands pipelined (one GET or EXISTS per
 * block, never MGET, so the keys may live on different Redis Cluster slots)
 * and read the replies against one deadline for the whole call. get_many's
 * deadline moves on as values arrive, by the time each would take at
 * params.read_floor_mbps (KVT_REMOTE_READ_FLOOR_MBPS; each reader thread
 * earns its own, as if it had its share of that rate): a large restore that
 * keeps arriving at least that fast is not cut short and recomputed (64 MiB
 * at 200 MB/s takes 320 ms, past the default timeout), while a server that
 * never answers ends the call after timeout_ms, and one that stops sending
 * midway at most timeout_ms plus what its earlier values earned after the
 * call began. get_many splits a batch over params.read_conns connections,
 * one per thread of its own pool, each with its share of the GETs in flight
 * (on one server a few at a time, a window, not its whole share, so Redis
 * holds only those values' copies in its output buffers): a value is read
 * from the socket straight
 * into that thread's buffer (no client-library copies), checked there (CRC,
 * MAC, identity; the MAC pass is the costly one, so it is spread over the
 * threads) and decoded into the caller's page, while the other threads' values
 * are still arriving. Measured: bench/remote.sh, bench/RESULTS.md "Shared tier (T3)". A timeout or connection error
 * drops the connection (its pipeline is out of step) and turns the rest of
 * the call into misses; reconnects are tried with exponential backoff
 * (KVT_REMOTE_BACKOFF_MIN_MS doubling to KVT_REMOTE_BACKOFF_MAX_MS), not on
 * every call, and calls in between are misses at once. Errors are counted and
 * logged at most once per KVT_REMOTE_LOG_INTERVAL_S.
 *
 * Compression. With params.compress = KVT_REMOTE_COMPRESS_ZSTD the writer
 * compresses each payload with zstd at params.zstd_level before signing; the
 * record's codec field says which (the disk record's, so every reader knows),
 * and a payload that does not shrink is stored raw. Readers decode either,
 * whatever their own setting. A compressed value that does not decode to
 * exactly one payload is refused like any other bad value (counted in bad).
 *
 * Writes. kvt_remote_put copies the block into a bounded queue and returns; a
 * writer thread with its own connection compresses and signs the records (off
 * the caller's thread) and sends them as pipelined SETs (with EX ttl when
 * params.ttl_s is set). A queued block is visible from the moment put returns:
 * its index presence is added at once and get_many serves it from the queue
 * until it is sent. A full queue makes put wait up to put_wait_ms for the
 * writer, then the block is dropped and counted. A block the writer cannot
 * send because Redis refused it (an error reply) is dropped, counted, and its
 * presence leaves the index at the next call on the owner's thread. One that
 * never reached Redis (down, reconnecting, the connection lost or past the
 * write deadline) is held instead, up to params.retry_bytes of held blocks
 * (the newest dropped and counted beyond that: a prefix's first blocks are
 * worth more than its last, which are useless without them), keeps its
 * presence and is served from memory like a queued block, and the writer
 * sends it, oldest first, as soon as its connection is back (tried on the
 * reconnect backoff's schedule). A late SET is harmless: a key names exactly
 * one block. Nothing waits for held blocks: not put, not flush, not reads; at
 * close they get one try, and are dropped if Redis is still away.
 *
 * Prefix index. The tier keeps T3 presence (handle 0) for the blocks it knows
 * of: those it queued, and those kvt_remote_probe found. Redis evicts and
 * expires by its own policy, so presence is a belief: a get_many miss removes
 * it, and so does kvt_remote_remove (which never deletes the shared value:
 * other nodes may want it). The number of blocks known is capped at
 * size_bytes / value bytes (at least KVT_REMOTE_KNOWN_MIN), oldest forgotten
 * first; a forgotten block is found again by the next probe. Blocks other
 * nodes wrote are learned through kvt_remote_probe, which the cache calls
 * where its local match ends short of a prompt's full blocks.
 *
 * Budget. size_bytes is a soft budget: it sizes the known set, the capacity
 * the server reports and the stats. What Redis keeps is Redis's business
 * (maxmemory with allkeys-lru; docs/tiers.md "T3: the shared tier on Redis").
 *
 * Thread-safety: the owner serialises every kvt_remote_ call on one handle
 * (like the index it updates); the writer thread and get_many's reader
 * threads (params.read_conns - 1 of them, the caller being the first) are
 * internal. The maintenance
 * functions at the end (kvt_remote_scan, kvt_remote_clear) are standalone. */
#ifndef KVT_TIER_REMOTE_H
#define KVT_TIER_REMOTE_H

#include <stddef.h>
#include <stdint.h>

#include "blockhash.h"
#include "prefix.h"
#include "tier.h"

#define KVT_REMOTE_TIMEOUT_MS_DEFAULT 250 /* a probe call; a get_many call until values arrive */
/* get_many's deadline moves on by the time each value read would take at
 * this rate (see "Reads never block"). */
#define KVT_REMOTE_READ_FLOOR_MBPS 32
#define KVT_REMOTE_WRITE_TIMEOUT_MS_DEFAULT 2000 /* one pipelined batch of SETs */
#define KVT_REMOTE_QUEUE_DEFAULT 64
#define KVT_REMOTE_READ_CONNS_DEFAULT 4 /* get_many's connections and threads */
#define KVT_REMOTE_READ_CONNS_MAX 16
#define KVT_REMOTE_ZSTD_LEVEL_DEFAULT 1              /* chosen by measurement: bench/RESULTS.md "zstd on T3" */
#define KVT_REMOTE_PUT_WAIT_MS_DEFAULT 50            /* shorter than the disk's: a network write may be dropped */
#define KVT_REMOTE_RETRY_BYTES_DEFAULT (64ull << 20) /* blocks held while Redis is unreachable (see "Writes") */
#define KVT_REMOTE_BACKOFF_MIN_MS 100
#define KVT_REMOTE_BACKOFF_MAX_MS 5000
#define KVT_REMOTE_LOG_INTERVAL_S 10.0
#define KVT_REMOTE_KNOWN_MIN 1024
#define KVT_REMOTE_KEY_PREFIX "kvt:"
/* "kvt:" + 32 hex + ":" + 32 hex, and a NUL */
#define KVT_REMOTE_KEY_LEN (4 + 32 + 1 + 32)

typedef struct kvt_remote kvt_remote;

typedef enum { KVT_REMOTE_COMPRESS_NONE = 0, KVT_REMOTE_COMPRESS_ZSTD = 1 } kvt_remote_compress;

typedef struct {
    const char *url;              /* redis://[user:pass@]host[:port][/db] or unix:///path. Copied. */
    const char *key_file;         /* the shared MAC key (see "Key file"); required. Read at open. */
    const char *password_file;    /* Redis's password, one line, instead of the URL's (0600, no links);
                                     optional. Read at open, sent by every connection's AUTH. */
    uint64_t size_bytes;          /* soft budget (see "Budget"); > 0 */
    uint32_t ttl_s;               /* SET ... EX ttl_s; 0: no expiry (Redis's eviction policy decides) */
    size_t payload_bytes;         /* bytes of one block's K/V; > 0, <= KVT_DISK_PAYLOAD_MAX */
    uint32_t block_tokens;        /* B (equal to the index's) */
    kvt_hash128 ns;               /* namespace: the unsalted root */
    kvt_prefix *index;            /* optional; borrowed, must outlive the tier */
    uint32_t timeout_ms;          /* per read call (get_many, probe), connect included; >= 1 */
    uint32_t write_timeout_ms;    /* per pipelined batch of SETs; >= 1 */
    uint32_t queue_depth;         /* blocks waiting for the writer; memory: depth x value */
    uint32_t put_wait_ms;         /* how long a put waits for queue room before dropping */
    uint32_t read_conns;          /* 1..KVT_REMOTE_READ_CONNS_MAX: get_many's connections (and threads) */
    double read_floor_mbps;       /* > 0: values read move get_many's deadline on by their time at this
                                     rate ("Reads never block"); default KVT_REMOTE_READ_FLOOR_MBPS */
    kvt_remote_compress compress; /* how the writer stores payloads (readers take either) */
    int zstd_level;               /* with KVT_REMOTE_COMPRESS_ZSTD: ZSTD_minCLevel()..ZSTD_maxCLevel() */
    uint64_t retry_bytes;         /* memory for blocks held while Redis is unreachable (see "Writes"); 0: none,
                                 they are dropped */
} kvt_remote_params;

typedef struct {
    uint64_t budget_bytes, value_bytes;         /* value_bytes: one record as stored (header + payload) */
    uint64_t known;                             /* blocks with T3 presence in the index now */
    uint64_t hits, misses;                      /* get_many outcomes per block (queue hits included in hits) */
    uint64_t bad;                               /* values refused: unparseable, CRC, MAC, namespace, parent, tokens */
    uint64_t queue_hits;                        /* blocks served from the write queue */
    uint64_t puts, dup_puts;                    /* blocks stored in Redis (SET answered OK); puts of a known block */
    uint64_t dropped;                           /* blocks not stored: queue full past the wait, error replies, Redis
                                           down with the retry holding full (or at close) */
    uint64_t put_waits;                         /* puts that found the queue full and waited */
    uint64_t forgotten;                         /* known blocks forgotten to stay within the known cap */
    uint64_t bytes_read, bytes_written;         /* value bytes */
    uint64_t payload_written;                   /* payload bytes of the values written (before compression) */
    uint64_t compressed, incompressible;        /* values written zstd-compressed; values that did not shrink (raw) */
    uint64_t errors;                            /* connection failures, timeouts, error replies */
    uint64_t timeouts;                          /* of those, calls cut by their deadline */
    uint64_t connects;                          /* successful (re)connections, both threads */
    uint64_t probes, probe_blocks, probe_found; /* kvt_remote_probe calls, blocks asked, found */
    uint64_t round_trips;                       /* read calls that reached Redis */
    double latency_sum_s;                       /* their wall time */
    uint32_t queued;                            /* blocks waiting for the writer now */
    uint64_t retry_held;                        /* blocks held for Redis's return now (see "Writes") */
    uint64_t retry_sent, retry_dropped; /* held blocks stored later; blocks not held because the holding was full
                                           (also in dropped) */
    int connected;                      /* the read connection is up now */
    int writer_connected;               /* the writer's connection is up now */
} kvt_remote_stats;

/* The remote tier behind the tier interface (tier.h); the instance is a kvt_remote. */
extern const kvt_tier_ops kvt_remote_tier_ops;

/* size 4 GiB, no TTL, timeouts, queue, put wait, read connections, zstd
 * level and retry bytes at their defaults, no compression, the rest 0/NULL.
 * The caller sets url, key_file, payload_bytes, block_tokens, ns. */
kvt_remote_params kvt_remote_default_params(void);

/* Checks the parameters, reads the key file and starts the writer thread.
 * Does not need Redis to be up: the first call connects, and a Redis that is
 * down is a run of misses until it comes back. Returns 0 and *out, or
 * KVT_EARG (bad parameters or URL; the message says which), -EACCES /
 * KVT_EFORMAT / -errno (the key file: missing, not ours, not 0600, not
 * KVT_DISK_KEY_BYTES long). Close with kvt_remote_close. */
int kvt_remote_open(const kvt_remote_params *p, kvt_remote **out);

/* Waits for the queue to drain (bounded by the write timeout per batch),
 * stops the writer, removes the tier's T3 presence from the index (which must
 * still be alive), disconnects. The values stay in Redis. NULL is a no-op. */
void kvt_remote_close(kvt_remote *r);

/* Queues a copy of a block (tokens and payload copied before return).
 * Returns 0 (queued: in the tier from now on), 1 (a block with this key is
 * known or queued), KVT_ELIMIT (the queue stayed full for put_wait_ms:
 * dropped and counted) or -EEXIST (the key names another block in the index).
 * Never does network I/O itself. */
int kvt_remote_put(kvt_remote *r, kvt_hash128 hash, kvt_hash128 parent, const int32_t *tokens, const void *payload);

/* Reads a batch (see tier.h): queued blocks from the queue, the rest with
 * pipelined GETs (a few in flight per connection), within timeout_ms and
 * what the values read earn ("Reads never block"). Sets each result;
 * returns the hits. A miss removes the block's T3 presence. */
size_t kvt_remote_get_many(kvt_remote *r, kvt_tier_read *reqs, size_t n);

/* Asks Redis, in one pipelined round trip of EXISTS within timeout_ms, which
 * of n_blocks consecutive blocks exist: block i has key hashes[i], tokens
 * tokens[i*B .. (i+1)*B) and parent hashes[i-1] (parent for i = 0). Adds the
 * leading run that exists to the index as T3 presence, stopping at the first
 * absent block or index refusal (the index's registration contract: the
 * caller must have matched or added the block named by parent). Returns the
 * length of that run. */
size_t kvt_remote_probe(kvt_remote *r, kvt_hash128 parent, const int32_t *tokens, const kvt_hash128 *hashes,
                        size_t n_blocks);

/* 1 if the block is known (index presence) or queued, else 0. No I/O. */
int kvt_remote_contains(kvt_remote *r, kvt_hash128 hash);

/* Forgets a block locally (presence; a queued copy is not sent). The shared
 * value stays. 0 or KVT_ENOTFOUND. */
int kvt_remote_remove(kvt_remote *r, kvt_hash128 hash);

/* Waits until every block queued so far is stored, held (see "Writes") or
 * dropped. Returns 0, or -EIO if the writer could not reach Redis for the
 * last batch. */
int kvt_remote_flush(kvt_remote *r);

/* Holds (paused != 0) or resumes the writer: queued blocks stay in the queue,
 * readable. For tests; flush and close resume it. */
void kvt_remote_pause_writer(kvt_remote *r, int paused);

void kvt_remote_get_stats(kvt_remote *r, kvt_remote_stats *out);

/* "none" or "zstd" into *out: 0, or KVT_EARG naming the flag. */
int kvt_remote_compress_parse(const char *s, kvt_remote_compress *out);

/* The Redis key of a block: KVT_REMOTE_KEY_LEN chars and a NUL in out. */
void kvt_remote_key(kvt_hash128 ns, kvt_hash128 hash, char out[KVT_REMOTE_KEY_LEN + 1]);

/* ---- Redis Cluster -------------------------------------------------------- */

/* Cluster. With a redis-cluster://host:port[,host:port...] URL, or a plain
 * redis:// URL whose server says cluster_enabled:1 when the tier opens, the
 * tier is a cluster client: it fetches the slot map (CLUSTER SHARDS, or
 * CLUSTER SLOTS from servers older than Redis 7) from any node it knows,
 * sends each key's command to the primary owning its slot (the key's CRC16
 * modulo 16384, kvt_remote_key_slot) on a connection of its own per node and
 * thread, and groups a get_many batch, a probe and a writer batch by node,
 * every node's pipeline in flight at once under the same one deadline. A
 * MOVED reply points the slot at the node named and marks the map stale (it
 * is fetched again before the next call, at most every 100 ms); an ASK reply
 * is followed once (ASKING, then the command) in the same call. A key that
 * cannot be read in the call (redirected twice, a node down, the deadline)
 * is a miss, as with one server; connection failures also mark the map
 * stale, so a failover's new primary is found. With replica_reads=yes in the
 * URL, reads and probes are spread over each shard's primary and its online
 * replicas (READONLY connections): a replica that lags answers a miss or the
 * same bytes, since keys name exactly one block and values are checked.
 * Database numbers do not exist in a cluster (a /db is refused); AUTH is
 * sent to every node; TLS is not supported (hiredis 0.14). */

/* CRC16-CCITT (XMODEM: polynomial 0x1021, initial 0), Redis Cluster's key hash. */
uint16_t kvt_remote_crc16(const void *data, size_t len);

/* The cluster hash slot (0..16383) of a key: its CRC16 modulo 16384, or that
 * of its hash tag: the bytes between the first '{' and the first '}' after
 * it, when there are some. */
uint16_t kvt_remote_key_slot(const char *key, size_t len);

/* One cluster node's counters (kvtier.h). */
typedef kvt_t3_shard_stats kvt_remote_shard_stats;

/* Up to cap nodes' counters into out; returns how many nodes there are
 * (0: not a cluster). */
size_t kvt_remote_get_shard_stats(kvt_remote *r, kvt_remote_shard_stats *out, size_t cap);

/* ---- maintenance (kvtier cache --kv-remote) ---------------------------- */

/* Usage of one namespace in the store. */
typedef struct {
    kvt_hash128 ns;
    uint64_t values, bytes; /* bytes: STRLEN of each value */
} kvt_remote_ns_usage;

/* On a cluster, both walk every primary. password_file: as in
 * kvt_remote_params (NULL: the URL's password, if any). */

/* Walks every kvt:* key with SCAN (COUNT batches, never KEYS) and sums values
 * and bytes per namespace into out[0..cap) (*n_out namespaces; the ones past
 * cap are summed into *other). Connects with timeout_ms per call. Returns 0,
 * KVT_EARG (bad URL) or -EIO (connection or command failure; message says). */
int kvt_remote_scan(const char *url, const char *password_file, uint32_t timeout_ms, kvt_remote_ns_usage *out,
                    size_t cap, size_t *n_out, kvt_remote_ns_usage *other);

/* Deletes every value of namespace ns (SCAN MATCH kvt:<ns>:*, UNLINK in
 * batches). *removed gets the number of keys unlinked. Returns 0, KVT_EARG or -EIO. */
int kvt_remote_clear(const char *url, const char *password_file, uint32_t timeout_ms, kvt_hash128 ns, uint64_t *removed);

#endif
