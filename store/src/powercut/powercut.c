/*
 * powercut: a power-cut simulator at the system-call layer, loaded with LD_PRELOAD into a
 * process that writes a store (see store/src/powercut/mod.rs for how tests use it).
 *
 * It keeps a "durable image" of one data directory in a shadow directory: what a disk would
 * hold if the power went off now. The process itself reads and writes its real files as
 * usual (the page cache); the shadow only changes when a write would be durable:
 *
 * - File data (write, pwrite, writev, pwritev, ftruncate, fallocate, O_TRUNC) marks byte
 *   ranges dirty per file (per inode, so that an fsync through another descriptor of the
 *   same file counts). When fsync or fdatasync of the file returns, its dirty ranges are
 *   copied from the real file into the shadow and the shadow takes the file's size as it
 *   was when the sync started. close, sync_file_range, msync, sync and syncfs make
 *   nothing durable, so they are not interposed (sync_file_range neither flushes the
 *   drive's cache nor the file's metadata).
 *   Files opened with O_SYNC or O_DSYNC are durable at every write.
 * - Names (a file created, renamed, linked or unlinked) become durable only when the
 *   directory that holds the name is fsynced (POSIX's rule, stricter than ext4 in
 *   practice). Until then the shadow keeps the old name or none. A shadow file is a hard
 *   link to a per-inode file under <shadow>/.powercut/inodes, so a name made durable later
 *   shows whatever data of that inode is durable by then.
 * - Directories (mkdir, rmdir, a renamed directory) change in the shadow at once: the
 *   engines create their directories when they open, and we do not model losing them.
 *
 * Unsynced data is all lost (no torn subset of it survives); a sync interrupted by the
 * kill may leave part of its ranges in the shadow, as a real one may.
 *
 * Environment: FERROMQ_POWERCUT_DIR (the data directory; every path under it is tracked)
 * and FERROMQ_POWERCUT_SHADOW (the shadow, a copy of the data directory made before the
 * process started: what was there is durable). Without them the library does nothing.
 * FERROMQ_POWERCUT_TRACE=1 prints each durable step to stderr.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#ifndef FALLOC_FL_KEEP_SIZE
#define FALLOC_FL_KEEP_SIZE 0x01
#endif

/* ----- the real functions ----- */

#define REAL(name) real_##name
#define DECLARE_REAL(ret, name, ...) static ret (*real_##name)(__VA_ARGS__)
DECLARE_REAL(int, open, const char *, int, ...);
DECLARE_REAL(int, open64, const char *, int, ...);
DECLARE_REAL(int, openat, int, const char *, int, ...);
DECLARE_REAL(int, openat64, int, const char *, int, ...);
DECLARE_REAL(ssize_t, write, int, const void *, size_t);
DECLARE_REAL(ssize_t, pwrite, int, const void *, size_t, off_t);
DECLARE_REAL(ssize_t, pwrite64, int, const void *, size_t, off_t);
DECLARE_REAL(ssize_t, writev, int, const struct iovec *, int);
DECLARE_REAL(ssize_t, pwritev, int, const struct iovec *, int, off_t);
DECLARE_REAL(ssize_t, pwritev64, int, const struct iovec *, int, off_t);
DECLARE_REAL(ssize_t, pwritev2, int, const struct iovec *, int, off_t, int);
DECLARE_REAL(ssize_t, pwritev64v2, int, const struct iovec *, int, off_t, int);
DECLARE_REAL(int, ftruncate, int, off_t);
DECLARE_REAL(int, ftruncate64, int, off_t);
DECLARE_REAL(int, truncate, const char *, off_t);
DECLARE_REAL(int, truncate64, const char *, off_t);
DECLARE_REAL(int, fallocate, int, int, off_t, off_t);
DECLARE_REAL(int, fallocate64, int, int, off_t, off_t);
DECLARE_REAL(int, posix_fallocate, int, off_t, off_t);
DECLARE_REAL(int, posix_fallocate64, int, off_t, off_t);
DECLARE_REAL(int, fsync, int);
DECLARE_REAL(int, fdatasync, int);
DECLARE_REAL(int, rename, const char *, const char *);
DECLARE_REAL(int, renameat, int, const char *, int, const char *);
DECLARE_REAL(int, renameat2, int, const char *, int, const char *, unsigned int);
DECLARE_REAL(int, link, const char *, const char *);
DECLARE_REAL(int, linkat, int, const char *, int, const char *, int);
DECLARE_REAL(int, unlink, const char *);
DECLARE_REAL(int, unlinkat, int, const char *, int);
DECLARE_REAL(int, mkdir, const char *, mode_t);
DECLARE_REAL(int, mkdirat, int, const char *, mode_t);
DECLARE_REAL(int, rmdir, const char *);

static void *next_symbol(const char *name) {
    void *symbol = dlsym(RTLD_NEXT, name);
    if (symbol == NULL) {
        fprintf(stderr, "powercut: no next symbol %s\n", name);
        abort();
    }
    return symbol;
}

#define RESOLVE(name)                                                                          \
    do {                                                                                       \
        if (real_##name == NULL) real_##name = next_symbol(#name);                            \
    } while (0)

/* Every real function, looked up once (before any tracking starts, and by the first
 * interposed call of a process that loaded us without the environment). */
static void resolve_once(void);

static void resolve_all(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, resolve_once);
}

static void resolve_once(void) {
    RESOLVE(open);
    RESOLVE(open64);
    RESOLVE(openat);
    RESOLVE(openat64);
    RESOLVE(write);
    RESOLVE(pwrite);
    RESOLVE(pwrite64);
    RESOLVE(writev);
    RESOLVE(pwritev);
    RESOLVE(pwritev64);
    RESOLVE(pwritev2);
    RESOLVE(pwritev64v2);
    RESOLVE(ftruncate);
    RESOLVE(ftruncate64);
    RESOLVE(truncate);
    RESOLVE(truncate64);
    RESOLVE(fallocate);
    RESOLVE(fallocate64);
    RESOLVE(posix_fallocate);
    RESOLVE(posix_fallocate64);
    RESOLVE(fsync);
    RESOLVE(fdatasync);
    RESOLVE(rename);
    RESOLVE(renameat);
    RESOLVE(renameat2);
    RESOLVE(link);
    RESOLVE(linkat);
    RESOLVE(unlink);
    RESOLVE(unlinkat);
    RESOLVE(mkdir);
    RESOLVE(mkdirat);
    RESOLVE(rmdir);
}

/* ----- state ----- */

struct range {
    uint64_t start, end;
};

/* A tracked file: a real inode and its shadow inode file <shadow>/.powercut/inodes/<id>. */
struct inode {
    dev_t dev;
    ino_t ino;
    uint64_t id;
    struct range *dirty;
    size_t dirty_len, dirty_cap;
    /* Syncs taken (a snapshot of the dirty ranges) and the newest one applied, so that an
     * older sync finishing late does not shrink what a newer one made durable. */
    uint64_t syncs_taken, sync_applied;
};

/* A name change not yet durable: in directory `dir`, `name` now points at inode `id`, or at
 * nothing when id is 0. */
struct entry_op {
    char *name;
    uint64_t id;
};

struct dir {
    dev_t dev;
    ino_t ino;
    char *rel; /* "" for the data directory itself */
    struct entry_op *ops;
    size_t ops_len, ops_cap;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int enabled;
static int trace;
static char data_dir[PATH_MAX];
static char shadow_dir[PATH_MAX];
static uint64_t next_id = 1;
static uint64_t tmp_counter;
static struct inode *inodes;
static size_t inodes_len, inodes_cap;
static struct dir *dirs;
static size_t dirs_len, dirs_cap;

static void *grow(void *array, size_t *cap, size_t len, size_t size) {
    if (len < *cap) return array;
    size_t cap2 = *cap ? *cap * 2 : 16;
    void *bigger = realloc(array, cap2 * size);
    if (bigger == NULL) {
        fprintf(stderr, "powercut: out of memory\n");
        abort();
    }
    *cap = cap2;
    return bigger;
}

static void complain(const char *what, const char *path) {
    fprintf(stderr, "powercut: %s %s: %s\n", what, path, strerror(errno));
}

static struct inode *find_inode(dev_t dev, ino_t ino) {
    for (size_t i = 0; i < inodes_len; i++)
        if (inodes[i].dev == dev && inodes[i].ino == ino) return &inodes[i];
    return NULL;
}

static struct dir *find_dir(dev_t dev, ino_t ino) {
    for (size_t i = 0; i < dirs_len; i++)
        if (dirs[i].dev == dev && dirs[i].ino == ino) return &dirs[i];
    return NULL;
}

static struct dir *find_dir_rel(const char *rel) {
    for (size_t i = 0; i < dirs_len; i++)
        if (strcmp(dirs[i].rel, rel) == 0) return &dirs[i];
    return NULL;
}

static void inode_file(uint64_t id, char *out) {
    snprintf(out, PATH_MAX, "%s/.powercut/inodes/%llu", shadow_dir, (unsigned long long)id);
}

static void shadow_path(const char *dir_rel, const char *name, char *out) {
    if (dir_rel[0] == '\0')
        snprintf(out, PATH_MAX, "%s/%s", shadow_dir, name);
    else
        snprintf(out, PATH_MAX, "%s/%s/%s", shadow_dir, dir_rel, name);
}

/* Tracks a real inode as shadow inode `id` (a new file replaces a reused inode number). */
static struct inode *track_inode(dev_t dev, ino_t ino, uint64_t id) {
    struct inode *existing = find_inode(dev, ino);
    if (existing != NULL) {
        existing->id = id;
        existing->dirty_len = 0;
        existing->syncs_taken = existing->sync_applied = 0;
        return existing;
    }
    inodes = grow(inodes, &inodes_cap, inodes_len, sizeof *inodes);
    struct inode *inode = &inodes[inodes_len++];
    memset(inode, 0, sizeof *inode);
    inode->dev = dev;
    inode->ino = ino;
    inode->id = id;
    return inode;
}

static void track_dir(dev_t dev, ino_t ino, const char *rel) {
    struct dir *existing = find_dir(dev, ino);
    if (existing != NULL) {
        free(existing->rel);
        existing->rel = strdup(rel);
        return;
    }
    dirs = grow(dirs, &dirs_cap, dirs_len, sizeof *dirs);
    struct dir *dir = &dirs[dirs_len++];
    memset(dir, 0, sizeof *dir);
    dir->dev = dev;
    dir->ino = ino;
    dir->rel = strdup(rel);
}

static void mark_dirty(struct inode *inode, uint64_t start, uint64_t end) {
    if (end <= start) return;
    if (inode->dirty_len > 0) {
        struct range *last = &inode->dirty[inode->dirty_len - 1];
        if (start <= last->end && end >= last->start) {
            if (start < last->start) last->start = start;
            if (end > last->end) last->end = end;
            return;
        }
    }
    inode->dirty = grow(inode->dirty, &inode->dirty_cap, inode->dirty_len, sizeof *inode->dirty);
    inode->dirty[inode->dirty_len++] = (struct range){start, end};
}

/* ----- paths ----- */

/* Splits `path` (relative to dirfd) into the directory relative to the data directory and
 * the last component; returns 0 when it is not under the data directory. */
static int resolve(int dirfd, const char *path, char *dir_rel, char *name) {
    char full[PATH_MAX * 2];
    if (path == NULL || path[0] == '\0') return 0;
    if (path[0] == '/') {
        snprintf(full, sizeof full, "%s", path);
    } else {
        char base[PATH_MAX];
        if (dirfd == AT_FDCWD) {
            if (getcwd(base, sizeof base) == NULL) return 0;
        } else {
            char link[64];
            snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
            ssize_t n = readlink(link, base, sizeof base - 1);
            if (n < 0) return 0;
            base[n] = '\0';
        }
        snprintf(full, sizeof full, "%s/%s", base, path);
    }
    size_t len = strlen(full);
    while (len > 1 && full[len - 1] == '/') full[--len] = '\0';
    char *slash = strrchr(full, '/');
    if (slash == NULL) return 0;
    const char *last = slash + 1;
    if (strcmp(last, ".") == 0 || strcmp(last, "..") == 0 || last[0] == '\0') return 0;
    snprintf(name, NAME_MAX + 1, "%s", last);
    char parent[PATH_MAX * 2];
    if (slash == full) {
        snprintf(parent, sizeof parent, "/");
    } else {
        *slash = '\0';
        snprintf(parent, sizeof parent, "%s", full);
    }
    char canonical[PATH_MAX];
    if (realpath(parent, canonical) == NULL) return 0;
    size_t base_len = strlen(data_dir);
    if (strncmp(canonical, data_dir, base_len) != 0) return 0;
    if (canonical[base_len] == '\0') {
        dir_rel[0] = '\0';
    } else if (canonical[base_len] == '/') {
        snprintf(dir_rel, PATH_MAX, "%s", canonical + base_len + 1);
    } else {
        return 0;
    }
    /* Our own bookkeeping is not part of the image. */
    return !(dir_rel[0] == '\0' && strcmp(name, ".powercut") == 0);
}

/* ----- making things durable ----- */

/* Queues a name change in `dir_rel`, durable at the directory's next fsync. */
static void queue_entry(const char *dir_rel, const char *name, uint64_t id) {
    struct dir *dir = find_dir_rel(dir_rel);
    if (dir == NULL) return;
    dir->ops = grow(dir->ops, &dir->ops_cap, dir->ops_len, sizeof *dir->ops);
    dir->ops[dir->ops_len++] = (struct entry_op){strdup(name), id};
}

static void apply_entry(const char *dir_rel, const struct entry_op *op) {
    char target[PATH_MAX];
    shadow_path(dir_rel, op->name, target);
    if (op->id == 0) {
        if (REAL(unlink)(target) != 0 && errno != ENOENT) complain("unlink", target);
        if (trace) fprintf(stderr, "powercut: durable unlink %s\n", target);
        return;
    }
    char source[PATH_MAX], tmp[PATH_MAX];
    inode_file(op->id, source);
    snprintf(tmp, sizeof tmp, "%s/.powercut/tmp-%llu", shadow_dir,
             (unsigned long long)++tmp_counter);
    /* Link under a temporary name, then rename: replacing a name is atomic in the shadow. */
    if (REAL(link)(source, tmp) != 0) {
        complain("link", source);
        return;
    }
    if (REAL(rename)(tmp, target) != 0) complain("rename to", target);
    if (trace) fprintf(stderr, "powercut: durable name %s -> inode %llu\n", target,
                       (unsigned long long)op->id);
}

static int copy_ranges(int fd, uint64_t id, const struct range *ranges, size_t count,
                       uint64_t size, int resize) {
    char real_path[64], shadow[PATH_MAX];
    snprintf(real_path, sizeof real_path, "/proc/self/fd/%d", fd);
    inode_file(id, shadow);
    /* Read through a descriptor of our own: the caller's may be write-only. */
    int in = REAL(open)(real_path, O_RDONLY | O_CLOEXEC);
    if (in < 0) {
        complain("open for copy", real_path);
        return -1;
    }
    int out = REAL(open)(shadow, O_WRONLY | O_CLOEXEC);
    if (out < 0) {
        complain("open", shadow);
        close(in);
        return -1;
    }
    if (resize && REAL(ftruncate)(out, (off_t)size) != 0) complain("ftruncate", shadow);
    struct stat st;
    if (!resize && fstat(out, &st) == 0) size = (uint64_t)st.st_size;
    static char buffer[1 << 16];
    for (size_t i = 0; i < count; i++) {
        uint64_t at = ranges[i].start, end = ranges[i].end < size ? ranges[i].end : size;
        while (at < end) {
            size_t want = end - at < sizeof buffer ? (size_t)(end - at) : sizeof buffer;
            ssize_t n = pread(in, buffer, want, (off_t)at);
            if (n <= 0) break; /* the real file shrank meanwhile */
            if (REAL(pwrite)(out, buffer, (size_t)n, (off_t)at) != n) {
                complain("pwrite", shadow);
                break;
            }
            at += (uint64_t)n;
        }
    }
    close(out);
    close(in);
    if (trace)
        fprintf(stderr, "powercut: durable data of inode %llu: %zu range(s), size %llu\n",
                (unsigned long long)id, count, (unsigned long long)size);
    return 0;
}

static int cmp_range(const void *a, const void *b) {
    const struct range *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* fsync or fdatasync of `fd` (`sync` the real one): makes the file's writes durable, or a
 * directory's name changes. */
static int durable_sync(int fd, int (*sync)(int)) {
    struct stat st;
    if (!enabled || fstat(fd, &st) != 0) return sync(fd);
    if (S_ISDIR(st.st_mode)) {
        /* Name changes are rare: hold the lock across the sync, which keeps them in order. */
        pthread_mutex_lock(&lock);
        int result = sync(fd);
        struct dir *dir = result == 0 ? find_dir(st.st_dev, st.st_ino) : NULL;
        if (dir != NULL) {
            for (size_t i = 0; i < dir->ops_len; i++) {
                apply_entry(dir->rel, &dir->ops[i]);
                free(dir->ops[i].name);
            }
            dir->ops_len = 0;
        }
        pthread_mutex_unlock(&lock);
        return result;
    }
    if (!S_ISREG(st.st_mode)) return sync(fd);
    pthread_mutex_lock(&lock);
    struct inode *inode = find_inode(st.st_dev, st.st_ino);
    if (inode == NULL) {
        pthread_mutex_unlock(&lock);
        return sync(fd);
    }
    /* The size with the ranges, under the lock: a write recorded (so taken below) is in
     * it. Taken before, a write landing in between would be taken but clipped away. */
    if (fstat(fd, &st) != 0) {
        pthread_mutex_unlock(&lock);
        return sync(fd);
    }
    uint64_t id = inode->id;
    struct range *ranges = inode->dirty;
    size_t count = inode->dirty_len;
    inode->dirty = NULL;
    inode->dirty_len = inode->dirty_cap = 0;
    uint64_t generation = ++inode->syncs_taken;
    pthread_mutex_unlock(&lock);

    int result = sync(fd);

    pthread_mutex_lock(&lock);
    inode = find_inode(st.st_dev, st.st_ino);
    if (result != 0 || inode == NULL || inode->id != id) {
        /* Nothing became durable: the ranges stay dirty. */
        if (inode != NULL && inode->id == id)
            for (size_t i = 0; i < count; i++) mark_dirty(inode, ranges[i].start, ranges[i].end);
    } else {
        qsort(ranges, count, sizeof *ranges, cmp_range);
        size_t merged = 0;
        for (size_t i = 0; i < count; i++) {
            if (merged > 0 && ranges[i].start <= ranges[merged - 1].end) {
                if (ranges[i].end > ranges[merged - 1].end) ranges[merged - 1].end = ranges[i].end;
            } else {
                ranges[merged++] = ranges[i];
            }
        }
        /* A newer sync already applied sets the size; an older one only adds its data. */
        int newest = generation > inode->sync_applied;
        if (newest) inode->sync_applied = generation;
        copy_ranges(fd, id, ranges, merged, (uint64_t)st.st_size, newest);
    }
    pthread_mutex_unlock(&lock);
    free(ranges);
    return result;
}

/* ----- writes ----- */

/* The tracked inode behind `fd` (lock held), or NULL. */
static struct inode *tracked(int fd, struct stat *st) {
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) return NULL;
    return find_inode(st->st_dev, st->st_ino);
}

static int is_sync_fd(int fd) {
    int flags = fcntl(fd, F_GETFL);
    return flags >= 0 && (flags & (O_SYNC | O_DSYNC)) != 0;
}

/* Records a positional write (or size change) of [start, end) on fd. */
static void positional(int fd, uint64_t start, uint64_t end) {
    struct stat st;
    int sync_now = 0;
    pthread_mutex_lock(&lock);
    struct inode *inode = tracked(fd, &st);
    if (inode != NULL) {
        mark_dirty(inode, start, end);
        sync_now = is_sync_fd(fd);
    }
    pthread_mutex_unlock(&lock);
    if (sync_now) durable_sync(fd, REAL(fdatasync));
}

static size_t iov_total(const struct iovec *iov, int count) {
    size_t total = 0;
    for (int i = 0; i < count; i++) total += iov[i].iov_len;
    return total;
}

/* write/writev at the file offset: the lock is held across the call so that the offset
 * read after it belongs to this write. */
static ssize_t sequential(int fd, const void *buf, size_t len, const struct iovec *iov,
                          int iovcnt) {
    struct stat st;
    if (!enabled || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        return iov ? REAL(writev)(fd, iov, iovcnt) : REAL(write)(fd, buf, len);
    pthread_mutex_lock(&lock);
    struct inode *inode = find_inode(st.st_dev, st.st_ino);
    ssize_t n = iov ? REAL(writev)(fd, iov, iovcnt) : REAL(write)(fd, buf, len);
    int saved = errno, sync_now = 0;
    if (inode != NULL && n > 0) {
        off_t end = lseek(fd, 0, SEEK_CUR);
        if (end >= n) mark_dirty(inode, (uint64_t)(end - n), (uint64_t)end);
        sync_now = is_sync_fd(fd);
    }
    pthread_mutex_unlock(&lock);
    if (sync_now) durable_sync(fd, REAL(fdatasync));
    errno = saved;
    return n;
}

ssize_t write(int fd, const void *buf, size_t len) {
    resolve_all();
    return sequential(fd, buf, len, NULL, 0);
}

ssize_t writev(int fd, const struct iovec *iov, int iovcnt) {
    resolve_all();
    return sequential(fd, NULL, 0, iov, iovcnt);
}

#define POSITIONAL_WRITE(name, call, len)                                                      \
    do {                                                                                       \
        resolve_all();                                                                         \
        ssize_t n = call;                                                                      \
        if (enabled && n > 0) {                                                                \
            int saved = errno;                                                                 \
            positional(fd, (uint64_t)offset, (uint64_t)offset + (uint64_t)n);                  \
            errno = saved;                                                                     \
        }                                                                                      \
        (void)(len);                                                                           \
        return n;                                                                              \
    } while (0)

ssize_t pwrite(int fd, const void *buf, size_t len, off_t offset) {
    POSITIONAL_WRITE(pwrite, REAL(pwrite)(fd, buf, len, offset), len);
}
ssize_t pwrite64(int fd, const void *buf, size_t len, off_t offset) {
    POSITIONAL_WRITE(pwrite64, REAL(pwrite64)(fd, buf, len, offset), len);
}
ssize_t pwritev(int fd, const struct iovec *iov, int iovcnt, off_t offset) {
    POSITIONAL_WRITE(pwritev, REAL(pwritev)(fd, iov, iovcnt, offset), iov_total(iov, iovcnt));
}
ssize_t pwritev64(int fd, const struct iovec *iov, int iovcnt, off_t offset) {
    POSITIONAL_WRITE(pwritev64, REAL(pwritev64)(fd, iov, iovcnt, offset), 0);
}
ssize_t pwritev2(int fd, const struct iovec *iov, int iovcnt, off_t offset, int flags) {
    /* offset -1 means "at the file offset"; not used by the engines we test. */
    POSITIONAL_WRITE(pwritev2, REAL(pwritev2)(fd, iov, iovcnt, offset, flags), 0);
}
ssize_t pwritev64v2(int fd, const struct iovec *iov, int iovcnt, off_t offset, int flags) {
    POSITIONAL_WRITE(pwritev64v2, REAL(pwritev64v2)(fd, iov, iovcnt, offset, flags), 0);
}

/* ----- sizes ----- */

static int resize(int fd, off_t len, int (*call)(int, off_t)) {
    struct stat before;
    int have = enabled && fstat(fd, &before) == 0;
    int result = call(fd, len);
    if (result == 0 && have) {
        int saved = errno;
        uint64_t old = (uint64_t)before.st_size, new = (uint64_t)len;
        positional(fd, old < new ? old : new, old < new ? new : old);
        errno = saved;
    }
    return result;
}

int ftruncate(int fd, off_t len) {
    resolve_all();
    return resize(fd, len, REAL(ftruncate));
}
int ftruncate64(int fd, off_t len) {
    resolve_all();
    return resize(fd, len, REAL(ftruncate64));
}

static int truncate_path(const char *path, off_t len, int (*call)(const char *, off_t)) {
    resolve_all();
    if (!enabled) return call(path, len);
    int fd = REAL(open)(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return call(path, len);
    int result = resize(fd, len, REAL(ftruncate));
    int saved = errno;
    close(fd);
    errno = saved;
    return result;
}

int truncate(const char *path, off_t len) {
    resolve_all();
    return truncate_path(path, len, REAL(truncate));
}
int truncate64(const char *path, off_t len) {
    resolve_all();
    return truncate_path(path, len, REAL(truncate64));
}

static int allocate(int fd, int keep_size, off_t offset, off_t len, int result) {
    if (result == 0 && enabled && !keep_size) {
        int saved = errno;
        positional(fd, (uint64_t)offset, (uint64_t)offset + (uint64_t)len);
        errno = saved;
    }
    return result;
}

int fallocate(int fd, int mode, off_t offset, off_t len) {
    resolve_all();
    return allocate(fd, mode & FALLOC_FL_KEEP_SIZE, offset, len,
                    REAL(fallocate)(fd, mode, offset, len));
}
int fallocate64(int fd, int mode, off_t offset, off_t len) {
    resolve_all();
    return allocate(fd, mode & FALLOC_FL_KEEP_SIZE, offset, len,
                    REAL(fallocate64)(fd, mode, offset, len));
}
int posix_fallocate(int fd, off_t offset, off_t len) {
    resolve_all();
    return allocate(fd, 0, offset, len, REAL(posix_fallocate)(fd, offset, len));
}
int posix_fallocate64(int fd, off_t offset, off_t len) {
    resolve_all();
    return allocate(fd, 0, offset, len, REAL(posix_fallocate64)(fd, offset, len));
}

/* ----- syncs ----- */

int fsync(int fd) {
    resolve_all();
    return durable_sync(fd, REAL(fsync));
}

int fdatasync(int fd) {
    resolve_all();
    return durable_sync(fd, REAL(fdatasync));
}

/* ----- opening and creating ----- */

static int opened(int dirfd, const char *path, int flags, int existed, off_t old_size,
                  int fd) {
    if (fd < 0 || !enabled || (flags & (O_CREAT | O_TRUNC)) == 0) return fd;
    char dir_rel[PATH_MAX], name[NAME_MAX + 1];
    struct stat st;
    if (!resolve(dirfd, path, dir_rel, name) || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        return fd;
    int saved = errno;
    pthread_mutex_lock(&lock);
    if (!existed) {
        /* A new file: an empty shadow inode, its name durable at the directory's fsync. */
        uint64_t id = next_id++;
        char file[PATH_MAX];
        inode_file(id, file);
        int created = REAL(open)(file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (created < 0)
            complain("create", file);
        else
            close(created);
        track_inode(st.st_dev, st.st_ino, id);
        queue_entry(dir_rel, name, id);
    } else if (flags & O_TRUNC) {
        struct inode *inode = find_inode(st.st_dev, st.st_ino);
        if (inode != NULL) mark_dirty(inode, 0, (uint64_t)old_size);
    }
    pthread_mutex_unlock(&lock);
    errno = saved;
    return fd;
}

/* Whether `path` exists before an open that may create it, and its size. */
static int exists(int dirfd, const char *path, off_t *size) {
    struct stat st;
    *size = 0;
    if (fstatat(dirfd, path, &st, 0) != 0) return 0;
    *size = st.st_size;
    return 1;
}

#define OPEN_BODY(dirfd, call)                                                                 \
    do {                                                                                       \
        resolve_all();                                                                         \
        mode_t mode = 0;                                                                       \
        if (flags & (O_CREAT | __O_TMPFILE)) {                                                 \
            va_list args;                                                                      \
            va_start(args, flags);                                                             \
            mode = va_arg(args, mode_t);                                                       \
            va_end(args);                                                                      \
        }                                                                                      \
        off_t size = 0;                                                                        \
        int existed = enabled && (flags & (O_CREAT | O_TRUNC)) ? exists(dirfd, path, &size) : 1; \
        return opened(dirfd, path, flags, existed, size, call);                                \
    } while (0)

int open(const char *path, int flags, ...) {
    OPEN_BODY(AT_FDCWD, REAL(open)(path, flags, mode));
}
int open64(const char *path, int flags, ...) {
    resolve_all();
    OPEN_BODY(AT_FDCWD, REAL(open64)(path, flags, mode));
}
int openat(int dirfd, const char *path, int flags, ...) {
    resolve_all();
    OPEN_BODY(dirfd, REAL(openat)(dirfd, path, flags, mode));
}
int openat64(int dirfd, const char *path, int flags, ...) {
    resolve_all();
    OPEN_BODY(dirfd, REAL(openat64)(dirfd, path, flags, mode));
}
int creat(const char *path, mode_t mode) {
    return open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
}
int creat64(const char *path, mode_t mode) {
    return open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
}
/* The fortified entry points (_FORTIFY_SOURCE) of two-argument opens. */
int __open_2(const char *path, int flags) { return open(path, flags, 0); }
int __open64_2(const char *path, int flags) { return open(path, flags, 0); }
int __openat_2(int dirfd, const char *path, int flags) { return openat(dirfd, path, flags, 0); }
int __openat64_2(int dirfd, const char *path, int flags) {
    return openat(dirfd, path, flags, 0);
}

/* ----- names ----- */

/* The shadow inode of the file at (dirfd, path), or 0. */
static uint64_t inode_at(int dirfd, const char *path, int *is_dir) {
    struct stat st;
    *is_dir = 0;
    if (fstatat(dirfd, path, &st, AT_SYMLINK_NOFOLLOW) != 0) return 0;
    if (S_ISDIR(st.st_mode)) {
        *is_dir = 1;
        return 0;
    }
    struct inode *inode = find_inode(st.st_dev, st.st_ino);
    if (inode == NULL && S_ISREG(st.st_mode))
        fprintf(stderr, "powercut: %s is not tracked (created before or beside us)\n", path);
    return inode ? inode->id : 0;
}

static void join_rel(const char *dir_rel, const char *name, char *out) {
    if (dir_rel[0] == '\0')
        snprintf(out, PATH_MAX, "%s", name);
    else
        snprintf(out, PATH_MAX, "%s/%s", dir_rel, name);
}

static int do_rename(int olddir, const char *old, int newdir, const char *new,
                     unsigned int flags, int (*call)(int, const char *, int, const char *,
                                                     unsigned int)) {
    resolve_all();
    if (!enabled) return call(olddir, old, newdir, new, flags);
    char old_rel[PATH_MAX], old_name[NAME_MAX + 1], new_rel[PATH_MAX], new_name[NAME_MAX + 1];
    int old_in = resolve(olddir, old, old_rel, old_name);
    int new_in = resolve(newdir, new, new_rel, new_name);
    if (!old_in && !new_in) return call(olddir, old, newdir, new, flags);
    pthread_mutex_lock(&lock);
    int is_dir;
    uint64_t id = inode_at(olddir, old, &is_dir);
    int result = call(olddir, old, newdir, new, flags);
    int saved = errno;
    if (result == 0) {
        if (is_dir) {
            if (old_in && new_in) {
                char from[PATH_MAX], to[PATH_MAX], rel[PATH_MAX];
                shadow_path(old_rel, old_name, from);
                shadow_path(new_rel, new_name, to);
                if (REAL(rename)(from, to) != 0) complain("rename dir", from);
                join_rel(new_rel, new_name, rel);
                struct stat st;
                if (fstatat(newdir, new, &st, 0) == 0) track_dir(st.st_dev, st.st_ino, rel);
            }
        } else {
            if (new_in && id != 0) queue_entry(new_rel, new_name, id);
            if (old_in) queue_entry(old_rel, old_name, 0);
        }
    }
    pthread_mutex_unlock(&lock);
    errno = saved;
    return result;
}

static int call_rename(int olddir, const char *old, int newdir, const char *new,
                       unsigned int flags) {
    (void)olddir;
    (void)newdir;
    (void)flags;
    return REAL(rename)(old, new);
}
static int call_renameat(int olddir, const char *old, int newdir, const char *new,
                         unsigned int flags) {
    (void)flags;
    return REAL(renameat)(olddir, old, newdir, new);
}
static int call_renameat2(int olddir, const char *old, int newdir, const char *new,
                          unsigned int flags) {
    return REAL(renameat2)(olddir, old, newdir, new, flags);
}

int rename(const char *old, const char *new) {
    resolve_all();
    return do_rename(AT_FDCWD, old, AT_FDCWD, new, 0, call_rename);
}
int renameat(int olddir, const char *old, int newdir, const char *new) {
    resolve_all();
    return do_rename(olddir, old, newdir, new, 0, call_renameat);
}
int renameat2(int olddir, const char *old, int newdir, const char *new, unsigned int flags) {
    resolve_all();
    return do_rename(olddir, old, newdir, new, flags, call_renameat2);
}

static int do_link(int olddir, const char *old, int newdir, const char *new, int flags) {
    resolve_all();
    char new_rel[PATH_MAX], new_name[NAME_MAX + 1];
    if (!enabled || !resolve(newdir, new, new_rel, new_name))
        return REAL(linkat)(olddir, old, newdir, new, flags);
    pthread_mutex_lock(&lock);
    int is_dir;
    uint64_t id = inode_at(olddir, old, &is_dir);
    int result = REAL(linkat)(olddir, old, newdir, new, flags);
    int saved = errno;
    if (result == 0 && id != 0) queue_entry(new_rel, new_name, id);
    pthread_mutex_unlock(&lock);
    errno = saved;
    return result;
}

int link(const char *old, const char *new) { return do_link(AT_FDCWD, old, AT_FDCWD, new, 0); }
int linkat(int olddir, const char *old, int newdir, const char *new, int flags) {
    return do_link(olddir, old, newdir, new, flags);
}

static int remove_dir_at(int dirfd, const char *path) {
    resolve_all();
    char rel[PATH_MAX], name[NAME_MAX + 1];
    int in = enabled && resolve(dirfd, path, rel, name);
    int result = REAL(unlinkat)(dirfd, path, AT_REMOVEDIR);
    if (result == 0 && in) {
        int saved = errno;
        char shadow[PATH_MAX];
        shadow_path(rel, name, shadow);
        pthread_mutex_lock(&lock);
        REAL(rmdir)(shadow); /* fails if durable names are still in it: they stay */
        pthread_mutex_unlock(&lock);
        errno = saved;
    }
    return result;
}

int unlinkat(int dirfd, const char *path, int flags) {
    resolve_all();
    if (flags & AT_REMOVEDIR) return remove_dir_at(dirfd, path);
    char rel[PATH_MAX], name[NAME_MAX + 1];
    if (!enabled || !resolve(dirfd, path, rel, name)) return REAL(unlinkat)(dirfd, path, flags);
    int result = REAL(unlinkat)(dirfd, path, flags);
    if (result == 0) {
        int saved = errno;
        pthread_mutex_lock(&lock);
        queue_entry(rel, name, 0);
        pthread_mutex_unlock(&lock);
        errno = saved;
    }
    return result;
}

int unlink(const char *path) { return unlinkat(AT_FDCWD, path, 0); }
int rmdir(const char *path) { return remove_dir_at(AT_FDCWD, path); }

int mkdirat(int dirfd, const char *path, mode_t mode) {
    resolve_all();
    char rel[PATH_MAX], name[NAME_MAX + 1];
    int in = enabled && resolve(dirfd, path, rel, name);
    int result = REAL(mkdirat)(dirfd, path, mode);
    if (result == 0 && in) {
        int saved = errno;
        char shadow[PATH_MAX], joined[PATH_MAX];
        shadow_path(rel, name, shadow);
        join_rel(rel, name, joined);
        struct stat st;
        pthread_mutex_lock(&lock);
        if (REAL(mkdir)(shadow, 0755) != 0 && errno != EEXIST) complain("mkdir", shadow);
        if (fstatat(dirfd, path, &st, 0) == 0) track_dir(st.st_dev, st.st_ino, joined);
        pthread_mutex_unlock(&lock);
        errno = saved;
    }
    return result;
}

int mkdir(const char *path, mode_t mode) { return mkdirat(AT_FDCWD, path, mode); }

/* ----- start-up: what is in the shadow now is durable ----- */

static void adopt_tree(const char *rel) {
    char shadow[PATH_MAX], real[PATH_MAX];
    if (rel[0] == '\0') {
        snprintf(shadow, sizeof shadow, "%s", shadow_dir);
        snprintf(real, sizeof real, "%s", data_dir);
    } else {
        snprintf(shadow, sizeof shadow, "%s/%s", shadow_dir, rel);
        snprintf(real, sizeof real, "%s/%s", data_dir, rel);
    }
    struct stat st;
    if (stat(real, &st) != 0) return;
    track_dir(st.st_dev, st.st_ino, rel);
    DIR *dir = opendir(shadow);
    if (dir == NULL) return;
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL) {
        const char *name = entry->d_name;
        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) continue;
        if (rel[0] == '\0' && strcmp(name, ".powercut") == 0) continue;
        char child_rel[PATH_MAX], child_shadow[PATH_MAX], child_real[PATH_MAX];
        join_rel(rel, name, child_rel);
        snprintf(child_shadow, sizeof child_shadow, "%s/%s", shadow_dir, child_rel);
        snprintf(child_real, sizeof child_real, "%s/%s", data_dir, child_rel);
        struct stat shadow_st, real_st;
        if (lstat(child_shadow, &shadow_st) != 0) continue;
        if (S_ISDIR(shadow_st.st_mode)) {
            adopt_tree(child_rel);
        } else if (S_ISREG(shadow_st.st_mode) && stat(child_real, &real_st) == 0) {
            uint64_t id = next_id++;
            char file[PATH_MAX];
            inode_file(id, file);
            if (REAL(link)(child_shadow, file) != 0) complain("link", file);
            track_inode(real_st.st_dev, real_st.st_ino, id);
        }
    }
    closedir(dir);
}

__attribute__((constructor)) static void powercut_init(void) {
    const char *data = getenv("FERROMQ_POWERCUT_DIR");
    const char *shadow = getenv("FERROMQ_POWERCUT_SHADOW");
    if (data == NULL || shadow == NULL || data[0] == '\0' || shadow[0] == '\0') return;
    resolve_all();
    trace = getenv("FERROMQ_POWERCUT_TRACE") != NULL;
    if (realpath(data, data_dir) == NULL || realpath(shadow, shadow_dir) == NULL) {
        fprintf(stderr, "powercut: data %s or shadow %s missing\n", data, shadow);
        abort();
    }
    /* One process keeps the image: programs it starts do not track (nor load us). */
    unsetenv("FERROMQ_POWERCUT_DIR");
    unsetenv("FERROMQ_POWERCUT_SHADOW");
    unsetenv("LD_PRELOAD");
    char bookkeeping[PATH_MAX];
    snprintf(bookkeeping, sizeof bookkeeping, "%s/.powercut", shadow_dir);
    REAL(mkdir)(bookkeeping, 0755);
    snprintf(bookkeeping, sizeof bookkeeping, "%s/.powercut/inodes", shadow_dir);
    if (REAL(mkdir)(bookkeeping, 0755) != 0) {
        complain("mkdir (a stale shadow?)", bookkeeping);
        abort();
    }
    adopt_tree("");
    enabled = 1;
    if (trace)
        fprintf(stderr, "powercut: process %d tracks %s into %s\n", (int)getpid(), data_dir,
                shadow_dir);
}
