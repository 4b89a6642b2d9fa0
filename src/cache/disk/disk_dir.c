// SPDX-License-Identifier: MIT
/* The cache directory (tier_disk.h "Directory"): opened once and every file
 * relative to it: ownership and mode checks, the lock, the header file, the
 * key file, segment names and listing, the O_DIRECT probe and the
 * lifetime stats file. No state of its own: the store and the maintenance
 * walks pass the directory's fd. */
#include "disk_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sodium.h>

#include "common.h"

#define LOCK_NAME "lock"
#define HEADER_NAME "header"
#define HEADER_TMP_NAME "header.tmp"
#define PROBE_NAME ".odirect-probe"
#define STATS_NAME "stats" /* lifetime counters, text, rewritten atomically at close */
#define STATS_TMP_NAME "stats.tmp"
#define KEY_NAME "key" /* the directory's MAC key: KVT_DISK_KEY_BYTES random bytes, 0600 */
#define KEY_TMP_NAME "key.tmp"
#define SEG_PREFIX "seg-"
#define SEG_SUFFIX ".kvt"
#define HEADER_TEXT_MAX 256
#define HEADER_TITLE "kvtier-disk-cache"

/* ---- directory: opened once, every file relative to it ------------------ */

/* Opens the component name of the directory cur (an O_PATH fd, or AT_FDCWD)
 * as an O_PATH directory fd, never through a symlink; with create, a missing
 * one is made 0700 first. dir[0..upto) is the path up to and including this
 * component (last: nothing but slashes follows), for the messages: a link is
 * named, so that the user sees which part of the path to replace. */
static int open_component(int cur, const char *name, int create, const char *dir, int upto, int last) {
    const int flags = O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    int fd = openat(cur, name, flags);
    if (fd < 0 && errno == ENOENT && create) {
        if (mkdirat(cur, name, DIR_MODE) && errno != EEXIST)
            return kvt_fail(-errno, "cache dir %s: cannot create %.*s: %s", dir, upto, dir, strerror(errno));
        fd = openat(cur, name, flags);
    }
    int e = fd < 0 ? errno : ENOTDIR;
    struct stat sb;
    if (fd >= 0 && fstat(fd, &sb) == 0 && S_ISDIR(sb.st_mode)) return fd;
    if (fd >= 0) close(fd);
    if (fstatat(cur, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(sb.st_mode)) {
        if (last)
            return kvt_fail(-ELOOP,
                            "cache dir %s is a symbolic link: refusing to follow it (give the directory itself)", dir);
        return kvt_fail(-ELOOP,
                        "cache dir %s: %.*s is a symbolic link: refusing to follow it (a link anywhere on the path "
                        "could send our files elsewhere); give the path without links, as `realpath` prints it",
                        dir, upto, dir);
    }
    return kvt_fail(-e, "cache dir %s: cannot open %.*s: %s", dir, upto, dir, strerror(e));
}

/* Walks dir one component at a time from / (or the working directory)
 * through open_component: no component, "." and ".." included, is reached
 * through a symlink, so the directory we end in is the one the path names
 * lexically. Returns the directory opened for reading, or a negative error. */
static int walk_path(const char *dir, int create) {
    char *path = kvt_xstrdup(dir); /* the same offsets as dir; each component cut out in place */
    int cur = path[0] == '/' ? open("/", O_PATH | O_DIRECTORY | O_CLOEXEC) : AT_FDCWD;
    int rc = cur == -1 ? kvt_fail(-errno, "cache dir %s: cannot open /: %s", dir, strerror(errno)) : 0;
    for (char *c = path, *end; !rc && *c; c = end) {
        while (*c == '/') c++;
        end = c + strcspn(c, "/");
        int last = end[strspn(end, "/")] == 0;
        char saved = *end;
        *end = 0;
        if (*c && strcmp(c, ".")) {
            int fd = open_component(cur, c, create, dir, (int)(end - path), last);
            if (fd < 0) rc = fd;
            else {
                if (cur >= 0) close(cur);
                cur = fd;
            }
        }
        *end = saved;
    }
    int fd = rc;
    if (!rc) {
        fd = openat(cur, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0) fd = kvt_fail(-errno, "cache dir %s: cannot open: %s", dir, strerror(errno));
    }
    if (cur >= 0) close(cur);
    free(path);
    return fd;
}

/* Opens the cache directory and returns its fd (or a negative error, with a
 * message that says why and what to do). No component of the path is
 * followed through a symlink, the last one, ".", ".." and the parents
 * included: a planted link would send every file we create elsewhere. With
 * DIR_CREATE the directory (and missing parents) is created 0700. With
 * DIR_OWNED or DIR_CREATE a directory owned by another user, or writable by
 * group or others, is refused with -EACCES: whoever can write it can plant
 * links, FIFOs or forged records. */
int kvt_disk_dir_open(const char *dir, int how) {
    if (!*dir) return kvt_fail(-ENOENT, "cache dir: the path is empty");
    if (strlen(dir) >= PATH_MAX) return kvt_fail(-ENAMETOOLONG, "cache dir %s: path too long", dir);
    int fd = walk_path(dir, how == DIR_CREATE);
    if (fd < 0) return fd;
    if (how == DIR_READ) return fd;
    struct stat sb;
    if (fstat(fd, &sb)) {
        int e = errno;
        close(fd);
        return kvt_fail(-e, "cache dir %s: cannot stat: %s", dir, strerror(e));
    }
    if (sb.st_uid != geteuid()) {
        close(fd);
        return kvt_fail(-EACCES,
                        "cache dir %s belongs to uid %u, not to this user (uid %u): refusing it, since its owner could "
                        "plant links or forged records there; use a directory of your own",
                        dir, (unsigned)sb.st_uid, (unsigned)geteuid());
    }
    if (sb.st_mode & (S_IWGRP | S_IWOTH)) {
        close(fd);
        return kvt_fail(-EACCES,
                        "cache dir %s is writable by %s (mode %03o): refusing it, since they could plant links or "
                        "forged records there; fix it with `chmod 700 %s`",
                        dir, sb.st_mode & S_IWOTH ? "others" : "its group", (unsigned)(sb.st_mode & 0777), dir);
    }
    return fd;
}

/* Opens an existing (or, with O_CREAT, possibly new) file of the directory
 * dfd. Never through a symlink, and only a regular file: a FIFO would block a
 * read forever, a device would be written to. O_NONBLOCK keeps the open of a
 * FIFO from blocking; it is cleared again because io_uring turns it into
 * -EAGAIN on reads that wait for the disk. O_DIRECT is likewise set only once
 * the file is known to be regular (a FIFO refuses it at open with a vaguer
 * error). A file opened for writing must have no other hard link (we would
 * write into the other name's file too).
 * Returns the fd, or -ELOOP (a link), -EINVAL (not a regular file, or linked
 * elsewhere) or -errno, with a message naming the file. */
int kvt_disk_file_open(int dfd, const char *dir, const char *name, int flags, mode_t mode) {
    int fd = openat(dfd, name, (flags & ~O_DIRECT) | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode);
    if (fd < 0) {
        int e = errno;
        if (e == ELOOP) return kvt_fail(-ELOOP, "cache dir %s: %s is a symbolic link: not followed", dir, name);
        return kvt_fail(-e, "cache dir %s: cannot open %s: %s", dir, name, strerror(e));
    }
    struct stat sb;
    int e = 0;
    if (fstat(fd, &sb)) e = -errno;
    else if (!S_ISREG(sb.st_mode)) e = kvt_fail(-EINVAL, "cache dir %s: %s is not a regular file: not used", dir, name);
    else if ((flags & O_ACCMODE) != O_RDONLY && sb.st_nlink > 1)
        e = kvt_fail(-EINVAL, "cache dir %s: %s has other hard links: not written", dir, name);
    else {
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, (fl & ~O_NONBLOCK) | (flags & O_DIRECT))) e = -errno;
    }
    if (e) {
        close(fd);
        return e;
    }
    return fd;
}

/* Creates the temporary name in dfd for writing, afresh: O_EXCL, so nothing
 * already there (a stale temp from a crash, or a link planted under its name)
 * is ever opened. The old entry is unlinked first; unlinkat removes a link
 * itself, never its target. Returns the fd or a negative error. */
int kvt_disk_tmp_create(int dfd, const char *dir, const char *name, int extra_flags) {
    if (unlinkat(dfd, name, 0) && errno != ENOENT)
        return kvt_fail(-errno, "cache dir %s: cannot remove the stale %s: %s", dir, name, strerror(errno));
    int fd = openat(dfd, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | extra_flags, FILE_MODE);
    if (fd < 0) return kvt_fail(-errno, "cache dir %s: cannot create %s: %s", dir, name, strerror(errno));
    return fd;
}

/* Takes the directory's exclusive lock. Returns the lock fd (>= 0), or a
 * negative error naming the holder. A directory where the lock file can be
 * neither created nor opened (read-only and never used) gets -1 with
 * *unlocked set: there is nothing a writer could corrupt. */
int kvt_disk_lock_dir(int dfd, const char *dir, int *unlocked) {
    *unlocked = 0;
    int writable = 1;
    int fd = kvt_disk_file_open(dfd, dir, LOCK_NAME, O_RDWR | O_CREAT, FILE_MODE);
    if (fd == -EROFS || fd == -EACCES) {
        writable = 0;
        fd = kvt_disk_file_open(dfd, dir, LOCK_NAME, O_RDONLY, 0);
        if (fd == -ENOENT) {
            *unlocked = 1;
            return -1;
        }
    }
    if (fd < 0) return fd; /* kvt_disk_file_open said why */
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char pid[32] = "?";
        ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
        if (n > 0) {
            pid[n] = 0;
            pid[strcspn(pid, "\n")] = 0;
        }
        close(fd);
        if (e == EWOULDBLOCK) return kvt_fail(-EWOULDBLOCK, "cache dir %s is in use by pid %s", dir, pid);
        return kvt_fail(-e, "cache dir %s: cannot lock: %s", dir, strerror(e));
    }
    if (writable) {
        char pid[32];
        int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
        if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n)
            kvt_logk(KVT_LOG_DEBUG, "dir", "cache dir %s: cannot record our pid in the lock file", dir);
    }
    return fd;
}

/* The header's three text lines for ns into text; returns their length. */
static int header_text(char *text, size_t cap, kvt_hash128 ns) {
    return snprintf(text, cap, "%s\nversion %d\nnamespace %016" PRIx64 "%016" PRIx64 "\n", HEADER_TITLE,
                    KVT_DISK_FORMAT_VERSION, ns.hi, ns.lo);
}

/* Header file: three text lines, replaced atomically (temp, fsync, rename). */
int kvt_disk_write_header(int dfd, const char *dir, kvt_hash128 ns) {
    char text[HEADER_TEXT_MAX];
    int n = header_text(text, sizeof text, ns);
    int fd = kvt_disk_tmp_create(dfd, dir, HEADER_TMP_NAME, 0);
    if (fd < 0) return fd;
    int rc = 0;
    if (write(fd, text, (size_t)n) != n) rc = errno ? -errno : -EIO;
    if (!rc && fsync(fd)) rc = -errno;
    close(fd);
    if (!rc && renameat(dfd, HEADER_TMP_NAME, dfd, HEADER_NAME)) rc = -errno;
    if (rc) {
        unlinkat(dfd, HEADER_TMP_NAME, 0);
        return rc;
    }
    fsync(dfd);
    return 0;
}

/* The first header of an empty directory, written before anything else in
 * it so that a crash at any moment leaves the directory empty or holding a
 * whole header: both are used again (a stray lock or temp file would make it
 * a directory kvt_disk_dir_adopt refuses). The text goes into an unnamed
 * file (O_TMPFILE), fsync'd, then linked to its name, which never replaces:
 * a header another opener linked first is kept. Where the file system has no
 * O_TMPFILE (or /proc is missing) it falls back to kvt_disk_write_header. */
static int write_first_header(int dfd, const char *dir, kvt_hash128 ns) {
    char text[HEADER_TEXT_MAX];
    int n = header_text(text, sizeof text, ns);
    int fd = openat(dfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, FILE_MODE);
    if (fd < 0) return errno == EOPNOTSUPP || errno == EISDIR ? kvt_disk_write_header(dfd, dir, ns) : -errno;
    int rc = 0;
    if (write(fd, text, (size_t)n) != n) rc = errno ? -errno : -EIO;
    if (!rc && fsync(fd)) rc = -errno;
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    if (!rc && linkat(AT_FDCWD, proc, dfd, HEADER_NAME, AT_SYMLINK_FOLLOW) && errno != EEXIST) rc = -errno;
    close(fd);
    if (rc == -ENOENT) return kvt_disk_write_header(dfd, dir, ns);
    if (!rc) fsync(dfd);
    return rc;
}

int kvt_disk_read_header_at(int dfd, const char *dir, uint32_t *version, kvt_hash128 *ns, int *ours) {
    char text[HEADER_TEXT_MAX];
    *ours = 0;
    int fd = kvt_disk_file_open(dfd, dir, HEADER_NAME, O_RDONLY, 0);
    if (fd == -ENOENT) return kvt_fail(KVT_ENOTFOUND, "%s: no header", dir);
    if (fd == -ELOOP || fd == -EINVAL) /* a link or a FIFO is no header of ours */
        return kvt_fail(KVT_EFORMAT, "%s/%s is not a regular file", dir, HEADER_NAME);
    if (fd < 0) return fd;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n < 0) return -errno;
    text[n] = 0;
    /* the first line says whose file it is; the rest, if it was ours, whether it is whole */
    size_t tl = strlen(HEADER_TITLE);
    if ((size_t)n <= tl || memcmp(text, HEADER_TITLE, tl) || text[tl] != '\n')
        return kvt_fail(KVT_EFORMAT, "%s/%s is not a kvtier header (its first line is not '%s')", dir, HEADER_NAME,
                        HEADER_TITLE);
    *ours = 1;
    unsigned v;
    uint64_t hi, lo;
    int from = 0, to = 0; /* where the namespace's hex digits begin and end: exactly 32 of them */
    if (sscanf(text + tl + 1, "version %u namespace %n%16" SCNx64 "%16" SCNx64 "%n", &v, &from, &hi, &lo, &to) != 3 ||
        to - from != 32)
        return kvt_fail(KVT_EFORMAT,
                        "%s/%s is a kvtier header but damaged: its version or namespace line cannot be read", dir,
                        HEADER_NAME);
    *version = v;
    ns->hi = hi;
    ns->lo = lo;
    return 0;
}

int kvt_disk_read_header(const char *dir, uint32_t *version, kvt_hash128 *ns) {
    int dfd = kvt_disk_dir_open(dir, DIR_READ);
    if (dfd < 0) return dfd;
    int ours;
    int rc = kvt_disk_read_header_at(dfd, dir, version, ns, &ours);
    close(dfd);
    return rc;
}

/* Reads the directory's MAC key. It must be a regular file of exactly
 * KVT_DISK_KEY_BYTES, mode 0600, owned by owner (the directory's owner):
 * anyone else who could write it could choose the key and forge records, and
 * anyone who could read it could sign them. Returns 0, KVT_ENOTFOUND (no key
 * file) or a negative error whose message says why and what to do. */
static int key_read(int dfd, const char *dir, uid_t owner, mac_key *key) {
    int fd = kvt_disk_file_open(dfd, dir, KEY_NAME, O_RDONLY, 0);
    if (fd == -ENOENT) return KVT_ENOTFOUND;
    if (fd < 0) return fd;
    struct stat sb;
    int rc = 0;
    if (fstat(fd, &sb)) rc = -errno;
    else if (sb.st_uid != owner)
        rc = kvt_fail(-EACCES,
                      "cache dir %s: the key file belongs to uid %u, not to the directory's owner (uid %u): refusing "
                      "it; remove it (records signed with it become misses)",
                      dir, (unsigned)sb.st_uid, (unsigned)owner);
    else if ((sb.st_mode & 07777) != FILE_MODE)
        rc = kvt_fail(-EACCES,
                      "cache dir %s: the key file has mode %03o, not 600: refusing it, since others could read or "
                      "change it; fix it with `chmod 600 %s/%s`",
                      dir, (unsigned)(sb.st_mode & 07777), dir, KEY_NAME);
    else if (sb.st_size != KVT_DISK_KEY_BYTES || read(fd, key->bytes, KVT_DISK_KEY_BYTES) != KVT_DISK_KEY_BYTES)
        rc = kvt_fail(KVT_EFORMAT,
                      "cache dir %s: the key file is not %d bytes: refusing it; remove it (records signed with it "
                      "become misses)",
                      dir, KVT_DISK_KEY_BYTES);
    /* a random key is never all zeros: this one was zeroed or lost to damage, and a key anyone can guess would
     * let anyone sign records (and gc would drop every record the real key signed as foreign) */
    else if (sodium_is_zero(key->bytes, KVT_DISK_KEY_BYTES))
        rc = kvt_fail(KVT_EFORMAT,
                      "cache dir %s: the key file is all zeros (damaged): refusing it; put back a copy from a backup, "
                      "or remove it (records signed with it become misses)",
                      dir);
    close(fd);
    if (!rc) kvt_disk_key_prepare(key);
    return rc;
}

/* libsodium must be started before the key is prepared: every reader of the key
 * file (the store, walk, compact) starts it here. */
int kvt_disk_key_load(int dfd, const char *dir, uid_t owner, mac_key *key) {
    if (sodium_init() < 0) return kvt_fail(KVT_EUNSUPPORTED, "libsodium cannot start");
    return key_read(dfd, dir, owner, key);
}

/* Creates the directory's key: random bytes into a temp file (O_EXCL, 0600,
 * fsync'd), then linked to its name only if the name is free (linkat never
 * replaces), so a crash leaves no key or a whole one. Lock held. */
int kvt_disk_key_create(int dfd, const char *dir, mac_key *key) {
    int fd = kvt_disk_tmp_create(dfd, dir, KEY_TMP_NAME, 0);
    if (fd < 0) return fd;
    randombytes_buf(key->bytes, KVT_DISK_KEY_BYTES);
    kvt_disk_key_prepare(key);
    int rc = 0;
    if (fchmod(fd, FILE_MODE)) rc = -errno; /* a umask may have narrowed it; key_read wants 0600 exactly */
    else if (write(fd, key->bytes, KVT_DISK_KEY_BYTES) != KVT_DISK_KEY_BYTES) rc = errno ? -errno : -EIO;
    else if (fsync(fd)) rc = -errno;
    close(fd);
    if (!rc && linkat(dfd, KEY_TMP_NAME, dfd, KEY_NAME, 0)) rc = -errno;
    unlinkat(dfd, KEY_TMP_NAME, 0);
    if (rc) return kvt_fail(rc, "cache dir %s: cannot create the key file: %s", dir, strerror(-rc));
    fsync(dfd);
    return 0;
}

/* Names a fresh directory may hold: a file system's lost+found (a cache on
 * its own disk is often given the disk's root). */
static int ignorable_in_fresh(int dfd, const char *name) {
    struct stat sb;
    if (!strcmp(name, ".") || !strcmp(name, "..")) return 1;
    return !strcmp(name, "lost+found") && fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(sb.st_mode);
}

#define FOREIGN_SHOWN 3 /* foreign names a refusal lists */

/* Refuses a directory that holds files but no kvtier header (why says what
 * of the header), naming up to FOREIGN_SHOWN of them. Returns 0 and *fresh
 * when it holds nothing. */
static int check_empty(int dfd, const char *dir, const char *why, int *fresh) {
    DIR *dh = kvt_disk_dir_list(dfd);
    if (!dh) return kvt_fail(-errno, "cache dir %s: cannot list: %s", dir, strerror(errno));
    char shown[FOREIGN_SHOWN * (NAME_MAX + 4) + 1] = "";
    size_t used = 0, count = 0;
    struct dirent *e;
    while ((e = readdir(dh))) {
        if (ignorable_in_fresh(dfd, e->d_name)) continue;
        if (count++ < FOREIGN_SHOWN)
            used += (size_t)snprintf(shown + used, sizeof shown - used, "%s'%s'", used ? ", " : "", e->d_name);
    }
    closedir(dh);
    if (!count) {
        *fresh = 1;
        return 0;
    }
    char more[48] = "";
    if (count > FOREIGN_SHOWN) snprintf(more, sizeof more, " and %zu more", count - FOREIGN_SHOWN);
    return kvt_fail(-ENOTEMPTY,
                    "cache dir %s is not empty and is no kvtier cache (%s; it holds %s%s): refusing to use it, so "
                    "that none of its files is overwritten; give an empty or new directory",
                    dir, why, shown, more);
}

/* Decides, before anything in dfd is written, whether it may be used as a
 * cache directory: one that holds a kvtier header (of any format version:
 * what its records are worth is then the header's business) or nothing at
 * all (*fresh). Anything else is somebody else's directory, where the lock,
 * header, index or stats file we write would overwrite theirs. With
 * check_key, the directory's key file is checked too (owner, mode, size: see
 * key_read), so that a key we would refuse is refused before the lock is
 * taken. Writes nothing, except that with init_ns an empty directory gets its
 * first header at once (write_first_header). Returns 0, or a negative error
 * that says why and what to do. */
int kvt_disk_dir_adopt(int dfd, const char *dir, int check_key, const kvt_hash128 *init_ns, int *fresh) {
    *fresh = 0;
    uint32_t version;
    kvt_hash128 ns;
    int ours;
    int rc = kvt_disk_read_header_at(dfd, dir, &version, &ns, &ours);
    if (rc == KVT_ENOTFOUND) {
        rc = check_empty(dfd, dir, "no header file", fresh);
        /* not writable (read-only): the store's open finds that out and writes nothing */
        if (!rc && init_ns) (void)write_first_header(dfd, dir, *init_ns);
        return rc;
    }
    /* a header of ours whose lines are damaged is still ours: the store's open rewrites it, and
     * every record proves itself (its own version, CRCs, MAC), so nothing is lost by using it */
    if (rc == KVT_EFORMAT && !ours)
        return check_empty(dfd, dir, "its file '" HEADER_NAME "' is not a kvtier header", fresh);
    if (rc && rc != KVT_EFORMAT) return kvt_fail(rc, "cache dir %s: cannot read its header: %s", dir, strerror(-rc));
    if (!check_key) return 0;
    mac_key key;
    rc = kvt_disk_key_load(dfd, dir, geteuid(), &key);
    sodium_memzero(&key, sizeof key);
    return rc == KVT_ENOTFOUND ? 0 : rc;
}

/* 1 and *id if name is a segment file name. */
int kvt_disk_parse_seg_name(const char *name, uint64_t *id) {
    size_t lp = strlen(SEG_PREFIX), ls = strlen(SEG_SUFFIX), n = strlen(name);
    if (n != lp + 16 + ls || strncmp(name, SEG_PREFIX, lp) || strcmp(name + lp + 16, SEG_SUFFIX)) return 0;
    uint64_t v = 0;
    for (size_t i = lp; i < lp + 16; i++) {
        char c = name[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return 0;
        v = v << 4 | (uint64_t)d;
    }
    *id = v;
    return 1;
}

void kvt_disk_seg_name(char *out, size_t cap, uint64_t id) {
    snprintf(out, cap, SEG_PREFIX "%016" PRIx64 SEG_SUFFIX, id);
}

int kvt_disk_is_seg_tmp_name(const char *name) {
    size_t len = strlen(name), lt = strlen(TMP_SUFFIX);
    return len > lt && !strcmp(name + len - lt, TMP_SUFFIX) && !strncmp(name, SEG_PREFIX, strlen(SEG_PREFIX));
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* A fresh directory stream over dfd (its own file description, so listings
 * never share a read position). NULL with errno set on failure. */
DIR *kvt_disk_dir_list(int dfd) {
    int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return NULL;
    DIR *dh = fdopendir(fd);
    if (!dh) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return dh;
}

/* Segment ids in the directory dfd, ascending. warn_foreign logs each unknown
 * file. Returns the count (>= 0) and *ids (caller frees), or -errno. */
long kvt_disk_list_segments(int dfd, const char *dir, int warn_foreign, uint64_t **ids) {
    DIR *dh = kvt_disk_dir_list(dfd);
    *ids = NULL;
    if (!dh) return -errno;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(dh))) {
        const char *nm = e->d_name;
        uint64_t id;
        if (kvt_disk_parse_seg_name(nm, &id)) {
            if (n == cap) {
                cap = cap ? 2 * cap : 16;
                *ids = kvt_xrealloc(*ids, cap * sizeof **ids);
            }
            (*ids)[n++] = id;
            continue;
        }
        int known = !strcmp(nm, ".") || !strcmp(nm, "..") || !strcmp(nm, LOCK_NAME) || !strcmp(nm, HEADER_NAME) ||
            !strcmp(nm, HEADER_TMP_NAME) || !strcmp(nm, PROBE_NAME) || !strcmp(nm, STATS_NAME) ||
            !strcmp(nm, STATS_TMP_NAME) || !strcmp(nm, KEY_NAME) || !strcmp(nm, KEY_TMP_NAME) ||
            !strcmp(nm, CKPT_NAME) || !strcmp(nm, CKPT_TMP_NAME) || kvt_disk_is_seg_tmp_name(nm) ||
            !strncmp(nm, KVT_DISK_SIDE_PREFIX, strlen(KVT_DISK_SIDE_PREFIX));
        if (!known && warn_foreign)
            kvt_logk(KVT_LOG_WARN, "dir,file", "cache dir %s: ignoring foreign file '%s'", dir, nm);
    }
    closedir(dh);
    if (n) qsort(*ids, n, sizeof **ids, cmp_u64);
    return (long)n;
}

void *kvt_disk_aligned_buf(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, KVT_DISK_ALIGN, n ? kvt_disk_align_up(n) : KVT_DISK_ALIGN)) {
        kvt_logk(KVT_LOG_ERROR, "bytes", "out of memory allocating %zu aligned bytes", n);
        abort();
    }
    return p;
}

/* Tries O_DIRECT in dir: an aligned write and read of one block. */
int kvt_disk_probe_o_direct(int dfd, const char *dir) {
    int fd = kvt_disk_tmp_create(dfd, dir, PROBE_NAME, O_DIRECT);
    if (fd < 0) return fd;
    uint8_t *b = kvt_disk_aligned_buf(KVT_DISK_ALIGN);
    memset(b, 0, KVT_DISK_ALIGN);
    int rc = 0;
    if (pwrite(fd, b, KVT_DISK_ALIGN, 0) != KVT_DISK_ALIGN || pread(fd, b, KVT_DISK_ALIGN, 0) != KVT_DISK_ALIGN)
        rc = errno ? -errno : -EIO;
    free(b);
    close(fd);
    unlinkat(dfd, PROBE_NAME, 0);
    return rc;
}

/* The lifetime file: one "name value" line per counter, in this order. (Kept
 * out of clang-format: version 14 reflows this list differently on each run.) */
// clang-format off
#define LIFETIME_FIELDS(X) \
    X(sessions) X(lookup_blocks) X(lookup_hits) X(reads) X(read_misses) X(records_written) \
    X(writes_dropped) X(corrupt) X(bytes_read) X(bytes_written) X(evicted)
// clang-format on

static int read_lifetime_at(int dfd, const char *dir, kvt_disk_lifetime *out) {
    memset(out, 0, sizeof *out);
    int fd = kvt_disk_file_open(dfd, dir, STATS_NAME, O_RDONLY, 0);
    if (fd < 0) return fd == -ENOENT ? KVT_ENOTFOUND : fd;
    FILE *f = fdopen(fd, "r");
    if (!f) {
        close(fd);
        return -ENOMEM;
    }
    char name[64];
    unsigned long long v;
    while (fscanf(f, "%63s %llu", name, &v) == 2) {
#define READ_FIELD(F) \
    if (!strcmp(name, #F)) out->F = v;
        LIFETIME_FIELDS(READ_FIELD)
#undef READ_FIELD
    }
    fclose(f);
    return 0;
}

int kvt_disk_read_lifetime(const char *dir, kvt_disk_lifetime *out) {
    memset(out, 0, sizeof *out);
    int dfd = kvt_disk_dir_open(dir, DIR_READ);
    if (dfd < 0) return dfd;
    int rc = read_lifetime_at(dfd, dir, out);
    close(dfd);
    return rc;
}

void kvt_disk_lifetime_add(int dfd, const char *dir, const kvt_disk_lifetime *session) {
    kvt_disk_lifetime t;
    read_lifetime_at(dfd, dir, &t);
#define ADD_FIELD(F) t.F += session->F;
    LIFETIME_FIELDS(ADD_FIELD)
#undef ADD_FIELD
    int fd = kvt_disk_tmp_create(dfd, dir, STATS_TMP_NAME, 0);
    if (fd < 0) return;
    FILE *f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        unlinkat(dfd, STATS_TMP_NAME, 0);
        return;
    }
#define WRITE_FIELD(F) fprintf(f, "%s %llu\n", #F, (unsigned long long)t.F);
    LIFETIME_FIELDS(WRITE_FIELD)
#undef WRITE_FIELD
    int ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = fclose(f) == 0 && ok;
    if (ok && renameat(dfd, STATS_TMP_NAME, dfd, STATS_NAME) == 0) fsync(dfd);
    else unlinkat(dfd, STATS_TMP_NAME, 0);
}

/* ---- side files (tier_disk.h) ------------------------------------------ */

const char *kvt_disk_path(const kvt_disk *d) { return d->dir; }

static int side_name_ok(const char *dir, const char *name) {
    size_t pl = strlen(KVT_DISK_SIDE_PREFIX), n = strlen(name);
    if (strncmp(name, KVT_DISK_SIDE_PREFIX, pl) || n == pl || n > SEG_NAME_MAX || strchr(name, '/'))
        return kvt_fail(-EINVAL, "cache dir %s: '%s' is not a side file's name", dir, name);
    return 0;
}

int kvt_disk_side_open(kvt_disk *d, const char *name, int flags) {
    int rc = side_name_ok(d->dir, name);
    return rc ? rc : kvt_disk_file_open(d->dir_fd, d->dir, name, flags, FILE_MODE);
}

int kvt_disk_side_replace(kvt_disk *d, const char *name, const void *buf, size_t n) {
    int rc = side_name_ok(d->dir, name);
    if (rc) return rc;
    char tmp[SEG_NAME_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", name);
    int fd = kvt_disk_tmp_create(d->dir_fd, d->dir, tmp, 0);
    if (fd < 0) return fd;
    for (size_t at = 0; !rc && at < n;) {
        ssize_t w = write(fd, (const char *)buf + at, n - at);
        if (w <= 0) rc = w < 0 ? -errno : -EIO;
        else at += (size_t)w;
    }
    if (!rc && fsync(fd)) rc = -errno;
    close(fd);
    if (!rc && renameat(d->dir_fd, tmp, d->dir_fd, name)) rc = -errno;
    if (rc) {
        unlinkat(d->dir_fd, tmp, 0);
        return kvt_fail(rc, "cache dir %s: cannot write %s: %s", d->dir, name, strerror(-rc));
    }
    fsync(d->dir_fd);
    return 0;
}

kvt_disk_record_key *kvt_disk_side_key(const kvt_disk *d) {
    return d->p.mac && d->key_state != KEY_NONE ? kvt_disk_record_key_new(d->key.bytes) : NULL;
}

int kvt_disk_mac_off(const kvt_disk *d) { return !d->p.mac; }

int kvt_disk_key_read(const char *dir, kvt_disk_record_key **k) {
    *k = NULL;
    int dfd = kvt_disk_dir_open(dir, DIR_READ);
    if (dfd < 0) return dfd;
    struct stat db;
    mac_key key;
    int rc = fstat(dfd, &db) ? kvt_fail(-errno, "cache dir %s: %s", dir, strerror(errno))
                             : kvt_disk_key_load(dfd, dir, db.st_uid, &key); /* its owner's, as the store wants */
    close(dfd);
    if (!rc) *k = kvt_disk_record_key_new(key.bytes);
    sodium_memzero(&key, sizeof key);
    return rc;
}

int kvt_disk_fd_read_all(int fd, size_t max, uint8_t **buf, size_t *n) {
    *buf = NULL;
    *n = 0;
    struct stat sb;
    if (fstat(fd, &sb)) return -errno;
    if ((unsigned long long)sb.st_size > max) return -EFBIG;
    size_t at = 0, len = (size_t)sb.st_size;
    *buf = kvt_xmalloc(len ? len : 1);
    while (at < len) {
        ssize_t r = pread(fd, *buf + at, len - at, (off_t)at);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break; /* shorter than fstat said: what is there */
        at += (size_t)r;
    }
    *n = at;
    return 0;
}

int kvt_disk_side_read(const char *dir, const char *name, size_t max, uint8_t **buf, size_t *n) {
    *buf = NULL;
    *n = 0;
    if (side_name_ok(dir, name)) return -EINVAL;
    int dfd = kvt_disk_dir_open(dir, DIR_READ);
    if (dfd < 0) return dfd;
    int fd = kvt_disk_file_open(dfd, dir, name, O_RDONLY, 0);
    close(dfd);
    if (fd < 0) return fd;
    int rc = kvt_disk_fd_read_all(fd, max, buf, n);
    close(fd);
    return rc ? kvt_fail(rc, "cache dir %s: cannot read %s: %s", dir, name, strerror(-rc)) : 0;
}
