/* trace.c — prefix-caching request traces (trace.h): the JSONL loader, the
 * seeded synthetic trace, the ideal hit rate, and the mapping of a trace's
 * block ids to token blocks. */
#include "trace.h"

#include "scdb_common.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>


static int trace_push_id(scdb_trace *t, int64_t id)
{
    if (t->n_ids == t->cap_ids) {
        size_t c = t->cap_ids ? 2 * t->cap_ids : 4096;
        int64_t *p = realloc(t->ids, c * sizeof *p);
        if (!p) return -1;
        t->ids = p;
        t->cap_ids = c;
    }
    t->ids[t->n_ids++] = id;
    return 0;
}

/* Empty trace with off[0] = 0.  -1 on ENOMEM. */
static int trace_init(scdb_trace *t)
{
    memset(t, 0, sizeof *t);
    if (!(t->off = malloc(1024 * sizeof *t->off))) return -1;
    t->cap_req = 1024;
    t->off[0] = 0;
    return 0;
}

static int trace_end_req(scdb_trace *t)
{
    if (t->n_req + 2 > t->cap_req) {
        size_t c = t->cap_req ? 2 * t->cap_req : 1024;
        size_t *p = realloc(t->off, c * sizeof *p);
        if (!p) return -1;
        t->off = p;
        t->cap_req = c;
    }
    t->off[++t->n_req] = t->n_ids;
    {
        size_t len = t->off[t->n_req] - t->off[t->n_req - 1];
        if (len > t->max_blocks) t->max_blocks = len;
    }
    return 0;
}

void scdb_trace_free(scdb_trace *t)
{
    free(t->ids);
    free(t->off);
    memset(t, 0, sizeof *t);
}

/* Load a JSONL trace; the first bad line is an error naming it. */
int scdb_trace_load(const char *path, size_t max_req, const char *who, scdb_trace *t)
{
    FILE *f = fopen(path, "r");
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    ssize_t len;
    int rc = -1;

    if (!f) {
        fprintf(stderr, "%s: cannot open trace %s: %s\n", who, path, strerror(errno));
        return -1;
    }
    if (trace_init(t)) {
        fclose(f);
        return -1;
    }
    snprintf(t->source, sizeof t->source, "%s", scdb_data_relative(path));
    while ((len = getline(&line, &cap, f)) >= 0) {
        cJSON *j, *ids;
        lineno++;
        if (max_req && t->n_req >= max_req) break;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' '))
            line[--len] = '\0';
        if (len == 0) continue;
        if ((size_t)len > SCDB_TRACE_MAX_LINE) {
            fprintf(stderr, "%s:%zu: line longer than %u bytes\n", path, lineno, SCDB_TRACE_MAX_LINE);
            goto out;
        }
        j = cJSON_ParseWithLength(line, (size_t)len);
        if (!j || !cJSON_IsObject(j)) {
            fprintf(stderr, "%s:%zu: not a valid JSON object\n", path, lineno);
            cJSON_Delete(j);
            goto out;
        }
        ids = cJSON_GetObjectItemCaseSensitive(j, "hash_ids");
        if (!cJSON_IsArray(ids)) {
            fprintf(stderr, "%s:%zu: missing \"hash_ids\" array\n", path, lineno);
            cJSON_Delete(j);
            goto out;
        }
        {
            const cJSON *x;
            size_t k = 0;
            cJSON_ArrayForEach(x, ids) {
                double d = cJSON_IsNumber(x) ? x->valuedouble : -1;
                if (d < 0 || d != floor(d) || d > 9.0e15) {
                    fprintf(stderr, "%s:%zu: hash_ids[%zu] is not a non-negative integer\n",
                            path, lineno, k);
                    cJSON_Delete(j);
                    goto out;
                }
                if (trace_push_id(t, (int64_t)d)) goto oom;
                k++;
            }
        }
        cJSON_Delete(j);
        if (trace_end_req(t)) goto oom;
    }
    if (t->n_req == 0) {
        fprintf(stderr, "%s: no requests\n", path);
        goto out;
    }
    rc = 0;
    goto out;
oom:
    fprintf(stderr, "%s: out of memory reading %s\n", who, path);
out:
    free(line);
    fclose(f);
    if (rc) scdb_trace_free(t);
    return rc;
}

uint64_t scdb_trace_splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Zipf-ish pick in [0, n): rank ~ u^(1/(1-s)) shaped, s ~ 1.1. */
static size_t zipf_pick(uint64_t *rng, size_t n)
{
    double u = (double)(scdb_trace_splitmix(rng) >> 11) / 9007199254740992.0;
    size_t k = (size_t)(pow((double)n + 1, u)) - 1; /* log-uniform: P(k) ~ 1/(k+1) */
    return k < n ? k : n - 1;
}

/* The synthetic trace (--synthetic, or no trace file found).  Seeded, so
 * reproducible.  64 shared system prompts of 2..12 blocks with ~1/rank
 * popularity; 40% of requests open a session (a system prompt + 1..16 user
 * blocks), 60% continue one of the last 256 sessions (its whole previous
 * prompt + 1..6 new blocks: the previous answer and the next user turn);
 * requests are capped at 400 blocks.  Ids are allocated as blocks are
 * created, so equal ids are equal content. */
int scdb_trace_synthetic(size_t n_req, uint64_t seed, scdb_trace *t)
{
    enum { N_SYS = 64, N_LIVE = 256, MAX_B = 400 };
    int64_t next_id = 0, sys[N_SYS][12], *live[N_LIVE];
    size_t sys_len[N_SYS], live_len[N_LIVE] = {0}, n_live = 0;
    uint64_t rng = seed * 0x2545F4914F6CDD1Dull + 7;
    int rc = -1;

    memset(live, 0, sizeof live);
    if (trace_init(t)) return -1;
    snprintf(t->source, sizeof t->source, "synthetic (seed %llu, %zu requests)",
             (unsigned long long)seed, n_req);
    for (int i = 0; i < N_SYS; i++) {
        sys_len[i] = 2 + scdb_trace_splitmix(&rng) % 11;
        for (size_t k = 0; k < sys_len[i]; k++) sys[i][k] = next_id++;
    }
    for (size_t r = 0; r < n_req; r++) {
        int64_t *ids;
        size_t len, slot;
        if (n_live && scdb_trace_splitmix(&rng) % 10 < 6) {
            slot = scdb_trace_splitmix(&rng) % n_live;
            size_t add = 1 + scdb_trace_splitmix(&rng) % 6;
            len = live_len[slot] + add;
            if (len > MAX_B) len = MAX_B;
            ids = realloc(live[slot], len * sizeof *ids);
            if (!ids) goto out;
            for (size_t k = live_len[slot]; k < len; k++) ids[k] = next_id++;
        } else {
            size_t p = zipf_pick(&rng, N_SYS), user = 1 + scdb_trace_splitmix(&rng) % 16;
            slot = n_live < N_LIVE ? n_live++ : scdb_trace_splitmix(&rng) % N_LIVE;
            free(live[slot]);
            len = sys_len[p] + user;
            ids = malloc(len * sizeof *ids);
            if (!ids) goto out;
            memcpy(ids, sys[p], sys_len[p] * sizeof *ids);
            for (size_t k = sys_len[p]; k < len; k++) ids[k] = next_id++;
        }
        live[slot] = ids;
        live_len[slot] = len;
        for (size_t k = 0; k < len; k++)
            if (trace_push_id(t, ids[k])) goto out;
        if (trace_end_req(t)) goto out;
    }
    rc = 0;
out:
    for (int i = 0; i < N_LIVE; i++) free(live[i]);
    if (rc) scdb_trace_free(t);
    return rc;
}

/* ------------------------------------------------------ ideal hit rate */

/* (parent chain id, hash id) -> chain id: exact, open addressing.  Chain
 * ids are 1, 2, ... in order of first appearance; 0 is "no parent". */
typedef struct chain_ent {
    uint64_t parent;
    int64_t hash;
    uint64_t id;      /* 0 = empty slot */
} chain_ent;

typedef struct chain_map {
    chain_ent *e;
    size_t cap, n;
} chain_map;

static size_t chain_slot(uint64_t p, int64_t h, size_t cap)
{
    uint64_t s = p * 0x9E3779B97F4A7C15ull ^ (uint64_t)h;
    return (size_t)(scdb_trace_splitmix(&s) & (cap - 1));
}

/* Returns 1 if (p, h) was seen before; its chain id in *id. -1 on ENOMEM. */
static int chain_map_get_or_add(chain_map *m, uint64_t p, int64_t h, uint64_t *id)
{
    size_t j;
    if (2 * (m->n + 1) > m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 1 << 16;
        chain_ent *e = calloc(cap, sizeof *e);
        if (!e) return -1;
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->e[i].id) continue;
            j = chain_slot(m->e[i].parent, m->e[i].hash, cap);
            while (e[j].id) j = (j + 1) & (cap - 1);
            e[j] = m->e[i];
        }
        free(m->e);
        m->e = e;
        m->cap = cap;
    }
    for (j = chain_slot(p, h, m->cap); m->e[j].id; j = (j + 1) & (m->cap - 1))
        if (m->e[j].parent == p && m->e[j].hash == h) {
            *id = m->e[j].id;
            return 1;
        }
    m->e[j] = (chain_ent){p, h, ++m->n};
    *id = m->n;
    return 0;
}

/* Ideal hits of the first n_req requests, from the ids alone, and the
 * number of distinct chains (what an unbounded cache ends up storing). */
int scdb_trace_ideal_hits(const scdb_trace *t, size_t n_req, uint64_t *hits, uint64_t *refs,
                      uint64_t *distinct)
{
    chain_map m = {0};
    *hits = *refs = 0;
    for (size_t r = 0; r < n_req; r++) {
        uint64_t parent = 0;
        for (size_t i = t->off[r]; i < t->off[r + 1]; i++) {
            int seen = chain_map_get_or_add(&m, parent, t->ids[i], &parent);
            if (seen < 0) {
                free(m.e);
                return -1;
            }
            (*refs)++;
            *hits += (uint64_t)seen;
        }
    }
    *distinct = m.n;
    free(m.e);
    return 0;
}

int scdb_trace_chain_ids(const scdb_trace *t, size_t n_req, uint64_t *out, uint64_t *distinct)
{
    chain_map m = {0};
    for (size_t r = 0; r < n_req; r++) {
        uint64_t parent = 0;
        for (size_t i = t->off[r]; i < t->off[r + 1]; i++) {
            if (chain_map_get_or_add(&m, parent, t->ids[i], &parent) < 0) {
                free(m.e);
                return -1;
            }
            out[i] = parent;
        }
    }
    *distinct = m.n;
    free(m.e);
    return 0;
}

void scdb_trace_block_tokens(int64_t id, uint64_t seed, int32_t *t, uint32_t n)
{
    uint64_t s = seed * 0xD1B54A32D192ED03ull ^ (uint64_t)id * 0x9E3779B97F4A7C15ull;
    for (uint32_t i = 0; i < n; i++) t[i] = (int32_t)(scdb_trace_splitmix(&s) % 32000);
}

int scdb_trace_default_path(char *buf, size_t len)
{
    struct stat st;
    snprintf(buf, len, "%s/traces/%s", scdb_data_dir(), SCDB_TRACE_NAME);
    return stat(buf, &st) == 0 && S_ISREG(st.st_mode) ? 0 : -1;
}
