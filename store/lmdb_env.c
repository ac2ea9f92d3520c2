/* lmdb_env.c — the store's LMDB environment: open flags, map sizing and
 * growth, stale reader slots, transactions under the map lock, footprint
 * accounting. */
#define _GNU_SOURCE /* pthread_rwlockattr_setkind_np: writer-preferring lock */
#include "store_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#define DEFAULT_MAX_READERS 1024u

scdb_err st_lmdb_fail(int rc, const char *what, const char *file, int line)
{
    if (rc == 0) return SCDB_OK;
    /* a full map is handled (grown and retried) by the caller: not an error */
    if (rc != MDB_MAP_FULL && scdb_log_get_level() <= SCDB_LOG_ERROR)
        scdb_log_write(SCDB_LOG_ERROR, file, line, "lmdb %s: %s", what,
                       mdb_strerror(rc));
    switch (rc) {
    case MDB_NOTFOUND: return SCDB_ENOTFOUND;
    case MDB_MAP_FULL: return SCDB_EFULL;
    case MDB_TXN_FULL: return SCDB_ETOOBIG;
    case MDB_VERSION_MISMATCH:
    case MDB_INVALID: return SCDB_EFORMAT;
    case ENOMEM: return SCDB_ENOMEM;
    default: return SCDB_EIO;
    }
}

scdb_err st_lmdb_open(st_lmdb *l, const char *dir, uint64_t map_size,
                        uint64_t max_map_size, unsigned max_readers,
                        bool no_sync)
{
    pthread_rwlockattr_t attr;
    MDB_txn *txn = NULL;
    MDB_envinfo info;
    MDB_stat st;
    unsigned flags = MDB_NOTLS;
    int rc, dead = 0;
    scdb_err e = SCDB_OK;

    memset(l, 0, sizeof *l);
    if (mkdir(dir, 0755) && errno != EEXIST) {
        scdb_error("store: mkdir %s: %s", dir, strerror(errno));
        return SCDB_ESYS;
    }
    if (!(l->dir = strdup(dir))) return SCDB_ENOMEM;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    if (pthread_rwlock_init(&l->map_lock, &attr)) {
        pthread_rwlockattr_destroy(&attr);
        e = SCDB_ESYS;
        goto fail;
    }
    pthread_rwlockattr_destroy(&attr);
    l->map_lock_init = true;
    l->max_map_size = max_map_size;

    if ((rc = mdb_env_create(&l->env))) { e = SCDB_LMDB_FAIL(rc, "env_create"); goto fail; }
    if ((rc = mdb_env_set_maxdbs(l->env, 2)) ||
        (rc = mdb_env_set_maxreaders(l->env, max_readers ? max_readers : DEFAULT_MAX_READERS)) ||
        (rc = mdb_env_set_mapsize(l->env, (size_t)map_size))) {
        e = SCDB_LMDB_FAIL(rc, "env_set");
        goto fail;
    }
    /* MDB_NOTLS: read txns are not tied to threads (worker pools).
     * No MDB_WRITEMAP: a stray pointer write cannot corrupt the file.
     * Sync on every commit unless asked not to (store.h PERSISTENCE). */
    if (no_sync) flags |= MDB_NOSYNC;
    if ((rc = mdb_env_open(l->env, dir, flags, 0644))) {
        e = SCDB_LMDB_FAIL(rc, "env_open");
        goto fail;
    }
    if ((rc = mdb_reader_check(l->env, &dead))) {
        e = SCDB_LMDB_FAIL(rc, "reader_check");
        goto fail;
    }
    if (dead) scdb_info("store: cleared %d stale LMDB reader slot(s)", dead);
    /* An existing env may already be larger than asked for. */
    mdb_env_info(l->env, &info);
    l->map_size = info.me_mapsize;
    if (l->max_map_size < l->map_size) l->max_map_size = l->map_size;
    mdb_env_stat(l->env, &st);
    l->page_size = st.ms_psize;

    if ((rc = mdb_txn_begin(l->env, NULL, 0, &txn)) ||
        (rc = mdb_dbi_open(txn, "blocks", MDB_CREATE, &l->blocks)) ||
        (rc = mdb_dbi_open(txn, "meta", MDB_CREATE, &l->meta)) ||
        (rc = mdb_txn_commit(txn))) {
        if (txn && rc) mdb_txn_abort(txn);
        e = SCDB_LMDB_FAIL(rc, "open dbs");
        goto fail;
    }
    return SCDB_OK;
fail:
    st_lmdb_close(l);
    return e;
}

void st_lmdb_close(st_lmdb *l)
{
    if (l->env) mdb_env_close(l->env);
    if (l->map_lock_init) pthread_rwlock_destroy(&l->map_lock);
    free(l->dir);
    memset(l, 0, sizeof *l);
}

/* Another process grew the map: adopt its size (needs the lock exclusive). */
static void adopt_map_size(st_lmdb *l)
{
    MDB_envinfo info;
    pthread_rwlock_wrlock(&l->map_lock);
    mdb_env_set_mapsize(l->env, 0);
    mdb_env_info(l->env, &info);
    l->map_size = info.me_mapsize;
    pthread_rwlock_unlock(&l->map_lock);
}

static scdb_err txn_begin(st_lmdb *l, unsigned flags, MDB_txn **txn)
{
    for (int tries = 0;; tries++) {
        int rc;
        pthread_rwlock_rdlock(&l->map_lock);
        rc = mdb_txn_begin(l->env, NULL, flags, txn);
        if (rc == 0) return SCDB_OK;
        pthread_rwlock_unlock(&l->map_lock);
        if (rc != MDB_MAP_RESIZED || tries > 3)
            return SCDB_LMDB_FAIL(rc, "txn_begin");
        adopt_map_size(l);
    }
}

scdb_err st_lmdb_read_begin(st_lmdb *l, MDB_txn **txn)
{
    return txn_begin(l, MDB_RDONLY, txn);
}

void st_lmdb_read_end(st_lmdb *l, MDB_txn *txn)
{
    mdb_txn_abort(txn);
    pthread_rwlock_unlock(&l->map_lock);
}

scdb_err st_lmdb_write_begin(st_lmdb *l, MDB_txn **txn)
{
    return txn_begin(l, 0, txn);
}

int st_lmdb_write_commit(st_lmdb *l, MDB_txn *txn)
{
    int rc = mdb_txn_commit(txn);
    pthread_rwlock_unlock(&l->map_lock);
    return rc;
}

void st_lmdb_write_abort(st_lmdb *l, MDB_txn *txn)
{
    mdb_txn_abort(txn);
    pthread_rwlock_unlock(&l->map_lock);
}

scdb_err st_lmdb_grow(st_lmdb *l)
{
    uint64_t next;
    int rc;

    if (l->map_size >= l->max_map_size) {
        scdb_error("store: LMDB map is at its limit (%llu bytes)",
                   (unsigned long long)l->max_map_size);
        return SCDB_EFULL;
    }
    next = l->map_size * 2;
    if (next > l->max_map_size) next = l->max_map_size;
    pthread_rwlock_wrlock(&l->map_lock);
    rc = mdb_env_set_mapsize(l->env, (size_t)next);
    if (rc == 0) {
        MDB_envinfo info;
        mdb_env_info(l->env, &info);
        l->map_size = info.me_mapsize;
        l->growths++;
    }
    pthread_rwlock_unlock(&l->map_lock);
    if (rc) return SCDB_LMDB_FAIL(rc, "env_set_mapsize");
    scdb_info("store: LMDB map grown to %llu bytes", (unsigned long long)l->map_size);
    return SCDB_OK;
}

uint64_t st_lmdb_footprint(const st_lmdb *l, size_t vlen)
{
    /* LMDB 0.9: a node (8-byte header + key + data) larger than nodemax =
     * ((psize - 16) / 2 & ~1) - 2 moves its data to overflow pages (16-byte
     * page header each run); the leaf keeps an 8+16+8 byte node and a 2-byte
     * slot.  Inline values cost their node and slot. */
    uint64_t ps = l->page_size ? l->page_size : 4096;
    uint64_t nodemax = (((ps - 16) / 2) & ~(uint64_t)1) - 2;
    if (8 + 16 + vlen > nodemax)
        return (16 + vlen + ps - 1) / ps * ps + 8 + 16 + 8 + 2;
    return 8 + 16 + vlen + 2;
}

uint64_t st_lmdb_file_bytes(const st_lmdb *l)
{
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/data.mdb", l->dir);
    return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

uint64_t scdb_lmdb_free_bytes(const st_lmdb *l)
{
    struct statvfs v;
    if (!l->dir || statvfs(l->dir, &v)) return UINT64_MAX;
    return (uint64_t)v.f_bavail * (uint64_t)(v.f_frsize ? v.f_frsize : v.f_bsize);
}

bool scdb_lmdb_disk_full(const st_lmdb *l, int rc, uint64_t need, uint64_t *free_bytes)
{
    uint64_t avail = scdb_lmdb_free_bytes(l), ps = l->page_size ? l->page_size : 4096;

    *free_bytes = avail;
    if (rc == ENOSPC || rc == EDQUOT) return true;
    /* LMDB 0.9 says EIO for a short write ("filesystem full?" in its
     * mdb_page_flush): a full disk when what the transaction wrote (plus
     * its meta and branch pages) does not fit in what is left */
    return rc == EIO && avail != UINT64_MAX && avail < need + 64 * ps;
}
