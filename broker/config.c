/* config.c — broker configuration: defaults, the ini file (libinih) and
 * command-line overrides of the same keys. */
#include "broker.h"
#include "gguf.h"
#include "wire.h"

#include <errno.h>
#include <glob.h>
#include <ini.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void scdb_broker_config_defaults(scdb_broker_config *c)
{
    memset(c, 0, sizeof *c);
    scdb_default_endpoint(c->endpoint, sizeof c->endpoint);
    snprintf(c->data_dir, sizeof c->data_dir, "./scdb-data");
    c->hot_capacity = 256ull << 20;
    c->workers = 2;
    c->evict_threads = 1;
    c->heartbeat_ms = 1000;
    c->heartbeat_timeout_ms = 10000;
    c->max_request_bytes = 64ull << 20;
    c->max_tokens = 1u << 20;
    c->max_arenas_per_client = 64;
    c->max_sessions_per_client = 32;
    c->max_inflight_per_client = 64;
    c->max_arena_bytes = 4ull << 30;
    c->drain_timeout_ms = 30000;
    c->max_inflight = 1024;
    c->socket_mode = 0660;
    c->lookup_index = 1;
    c->log_level = SCDB_LOG_INFO;
    c->device = SCDB_DEVPREF_AUTO;
    snprintf(c->remote_key_prefix, sizeof c->remote_key_prefix, "scdb:");
    c->remote_ttl = 86400;
    c->remote_write_queue = 64ull << 20;
    c->remote_timeout_ms = 100;
}

void scdb_broker_config_clear(scdb_broker_config *c)
{
    if (!c) return;
    free(c->models);
    free(c->codebooks);
    free(c->pairs);
    free(c->policies);
    c->models = NULL;
    c->codebooks = NULL;
    c->pairs = NULL;
    c->policies = NULL;
    c->n_models = c->n_codebooks = c->n_pairs = c->n_policies = 0;
}

/* ------------------------------------------------------------ values */

static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    unsigned long long v;
    uint64_t mul = 1;

    while (*s == ' ' || *s == '\t') s++;
    if (*s == '-' || !*s) return -1;
    errno = 0;
    v = strtoull(s, &end, 0);
    if (errno || end == s) return -1;
    while (*end == ' ') end++;
    if (*end) {
        static const struct { const char *sfx; uint64_t mul; } sfx[] = {
            {"K", 1ull << 10}, {"KB", 1ull << 10}, {"KiB", 1ull << 10},
            {"M", 1ull << 20}, {"MB", 1ull << 20}, {"MiB", 1ull << 20},
            {"G", 1ull << 30}, {"GB", 1ull << 30}, {"GiB", 1ull << 30},
            {"T", 1ull << 40}, {"TB", 1ull << 40}, {"TiB", 1ull << 40},
        };
        size_t i;
        for (i = 0; i < SCDB_ARRAY_LEN(sfx); i++)
            if (!strcasecmp(end, sfx[i].sfx)) break;
        if (i == SCDB_ARRAY_LEN(sfx)) return -1;
        mul = sfx[i].mul;
    }
    if (v > UINT64_MAX / mul) return -1;
    *out = (uint64_t)v * mul;
    return 0;
}

static int parse_int(const char *s, long lo, long hi, long *out)
{
    uint64_t v;
    int neg = lo < 0 && *s == '-';    /* only where the key takes negatives */
    long x;
    if (parse_u64(s + neg, &v) || v > (uint64_t)LONG_MAX) return -1;
    x = neg ? -(long)v : (long)v;
    if (x < lo || x > hi) return -1;
    *out = x;
    return 0;
}

static int parse_bool(const char *s, int *out)
{
    if (!strcasecmp(s, "1") || !strcasecmp(s, "true") || !strcasecmp(s, "yes") ||
        !strcasecmp(s, "on")) { *out = 1; return 0; }
    if (!strcasecmp(s, "0") || !strcasecmp(s, "false") || !strcasecmp(s, "no") ||
        !strcasecmp(s, "off")) { *out = 0; return 0; }
    return -1;
}

static int parse_level(const char *s, scdb_log_level *out)
{
    static const char *names[] = {"debug", "info", "warn", "error", "off"};
    for (int i = 0; i < 5; i++)
        if (!strcasecmp(s, names[i])) { *out = (scdb_log_level)i; return 0; }
    return -1;
}

static int parse_raw_dtype(const char *s, scdb_dtype *out)
{
    if (!strcasecmp(s, "f16")) { *out = SCDB_F16; return 0; }
    if (!strcasecmp(s, "f32")) { *out = SCDB_F32; return 0; }
    return -1;
}

static int copy_str(char *dst, size_t cap, const char *s)
{
    size_t n = strlen(s);
    if (n >= cap) return -1;
    memcpy(dst, s, n + 1);
    return 0;
}

/* ------------------------------------------------------------ [broker] */

enum { K_STR, K_U64, K_U32, K_INT, K_BOOL, K_MODE, K_LEVEL, K_DEVICE, K_CPUS };

static const struct key {
    const char *name;
    int type;
    size_t off;
    size_t size;      /* K_STR: capacity */
    long lo, hi;      /* K_INT / K_U32 */
} keys[] = {
#define F(f) offsetof(scdb_broker_config, f)
#define S(f) sizeof(((scdb_broker_config *)0)->f)
    {"endpoint", K_STR, F(endpoint), S(endpoint), 0, 0},
    {"tcp_endpoint", K_STR, F(tcp_endpoint), S(tcp_endpoint), 0, 0},
    {"curve_secret_file", K_STR, F(curve_secret_file), S(curve_secret_file), 0, 0},
    {"curve_allow_file", K_STR, F(curve_allow_file), S(curve_allow_file), 0, 0},
    {"data_dir", K_STR, F(data_dir), S(data_dir), 0, 0},
    {"models_dir", K_STR, F(models_dir), S(models_dir), 0, 0},
    {"block_tokens", K_U32, F(block_tokens), 0, 0, SCDB_BLOCK_TOKENS_MAX},
    {"map_size", K_U64, F(map_size), 0, 0, 0},
    {"max_map_size", K_U64, F(max_map_size), 0, 0, 0},
    {"disk_capacity", K_U64, F(disk_capacity), 0, 0, 0},
    {"hot_capacity", K_U64, F(hot_capacity), 0, 0, 0},
    {"gpu_hot_capacity", K_U64, F(gpu_hot_capacity), 0, 0, 0},
    {"no_sync", K_BOOL, F(no_sync), 0, 0, 0},
    {"lookup_index", K_BOOL, F(lookup_index), 0, 0, 0},
    {"lookup_index_entries", K_U32, F(lookup_index_entries), 0, 0, 1u << 30},
    {"workers", K_INT, F(workers), 0, 1, 256},
    {"evict_threads", K_INT, F(evict_threads), 0, 0, 16},
    {"heartbeat_ms", K_INT, F(heartbeat_ms), 0, 10, 3600000},
    {"heartbeat_timeout_ms", K_INT, F(heartbeat_timeout_ms), 0, 50, 86400000},
    {"max_request_bytes", K_U64, F(max_request_bytes), 0, 0, 0},
    {"max_tokens", K_U32, F(max_tokens), 0, 1, 1 << 26},
    {"max_arenas_per_client", K_U32, F(max_arenas_per_client), 0, 0, 1 << 20},
    {"max_arena_bytes", K_U64, F(max_arena_bytes), 0, 0, 0},
    {"max_client_arena_bytes", K_U64, F(max_client_arena_bytes), 0, 0, 0},
    {"max_sessions_per_client", K_U32, F(max_sessions_per_client), 0, 0, 1 << 20},
    {"max_inflight_per_client", K_INT, F(max_inflight_per_client), 0, 1, 1 << 20},
    {"arena_total_bytes", K_U64, F(arena_total_bytes), 0, 0, 0},
    {"drain_timeout_ms", K_INT, F(drain_timeout_ms), 0, 0, 3600000},
    {"max_inflight", K_INT, F(max_inflight), 0, 1, 1 << 20},
    {"socket_mode", K_MODE, F(socket_mode), 0, 0, 0},
    {"socket_group", K_STR, F(socket_group), S(socket_group), 0, 0},
    {"log_level", K_LEVEL, F(log_level), 0, 0, 0},
    {"device", K_DEVICE, F(device), 0, 0, 0},
    {"metrics_listen", K_STR, F(metrics_listen), S(metrics_listen), 0, 0},
    {"worker_cpus", K_CPUS, F(worker_cpus), S(worker_cpus), 0, 0},
    {"worker_nice", K_INT, F(worker_nice), 0, -20, 19},
    {"evict_nice", K_INT, F(evict_nice), 0, -20, 19},
    /* [remote] NAME is remote_NAME here (and --remote-NAME as a flag) */
    {"remote_cluster", K_STR, F(remote_cluster), S(remote_cluster), 0, 0},
    {"remote_user", K_STR, F(remote_user), S(remote_user), 0, 0},
    {"remote_password_file", K_STR, F(remote_password_file), S(remote_password_file), 0, 0},
    {"remote_key_prefix", K_STR, F(remote_key_prefix), S(remote_key_prefix), 0, 0},
    {"remote_ttl", K_U64, F(remote_ttl), 0, 0, 0},
    {"remote_write_queue", K_U64, F(remote_write_queue), 0, 0, 0},
    {"remote_timeout_ms", K_INT, F(remote_timeout_ms), 0, 1, 600000},
#undef F
#undef S
};

scdb_err scdb_broker_config_set(scdb_broker_config *c, const char *key, const char *value,
                                char *errbuf, size_t errlen)
{
    char k[64];
    size_t i;
    char *p = (char *)c;

    if (copy_str(k, sizeof k, key)) goto unknown;
    for (char *q = k; *q; q++)
        if (*q == '-') *q = '_';
    for (i = 0; i < SCDB_ARRAY_LEN(keys); i++)
        if (!strcmp(keys[i].name, k)) break;
    if (i == SCDB_ARRAY_LEN(keys)) goto unknown;

    const struct key *d = &keys[i];
    switch (d->type) {
    case K_STR:
        if (copy_str(p + d->off, d->size, value)) goto bad;
        break;
    case K_CPUS: {
        unsigned char cpus[SCDB_BROKER_MAX_CPUS];
        /* "" unpins; anything else must be a list */
        if (*value && scdb_broker_cpu_list(value, cpus) < 0) {
            if (errbuf)
                snprintf(errbuf, errlen, "bad value '%s' for %s (cores 0..%d as \"0,1\" or "
                         "\"0-3,6\")", value, key, SCDB_BROKER_MAX_CPUS - 1);
            return SCDB_EINVAL;
        }
        if (copy_str(p + d->off, d->size, value)) goto bad;
        break;
    }
    case K_U64: {
        uint64_t v;
        if (parse_u64(value, &v)) goto bad;
        memcpy(p + d->off, &v, sizeof v);
        break;
    }
    case K_U32: {
        long v;
        uint32_t u;
        if (parse_int(value, d->lo, d->hi, &v)) goto bad;
        u = (uint32_t)v;
        memcpy(p + d->off, &u, sizeof u);
        break;
    }
    case K_INT: {
        long v;
        int iv;
        if (parse_int(value, d->lo, d->hi, &v)) goto bad;
        iv = (int)v;
        memcpy(p + d->off, &iv, sizeof iv);
        break;
    }
    case K_BOOL: {
        int v;
        if (parse_bool(value, &v)) goto bad;
        memcpy(p + d->off, &v, sizeof v);
        break;
    }
    case K_MODE: {
        char *end;
        unsigned long v = strtoul(value, &end, 8);
        unsigned m;
        if (end == value || *end || v > 0777) goto bad;
        m = (unsigned)v;
        memcpy(p + d->off, &m, sizeof m);
        break;
    }
    case K_LEVEL: {
        scdb_log_level l;
        if (parse_level(value, &l)) goto bad;
        memcpy(p + d->off, &l, sizeof l);
        break;
    }
    case K_DEVICE: {
        scdb_device_pref dp;
        if (scdb_device_parse(value, &dp)) {
            if (errbuf)
                snprintf(errbuf, errlen, "bad value '%s' for %s (auto, cpu or cuda)", value, key);
            return SCDB_EINVAL;
        }
        memcpy(p + d->off, &dp, sizeof dp);
        break;
    }
    }
    return SCDB_OK;
unknown:
    if (errbuf) snprintf(errbuf, errlen, "unknown setting '%s'", key);
    return SCDB_ENOTFOUND;
bad:
    if (errbuf) snprintf(errbuf, errlen, "bad value '%s' for %s", value, key);
    return SCDB_EINVAL;
}

int scdb_broker_cpu_list(const char *s, unsigned char cpus[SCDB_BROKER_MAX_CPUS])
{
    int n = 0;

    memset(cpus, 0, SCDB_BROKER_MAX_CPUS);
    if (!s || !*s) return -1;
    for (;;) {
        char *end;
        long lo, hi;
        if (*s < '0' || *s > '9') return -1;
        lo = hi = strtol(s, &end, 10);
        s = end;
        if (*s == '-') {
            if (s[1] < '0' || s[1] > '9') return -1;
            hi = strtol(s + 1, &end, 10);
            s = end;
        }
        if (lo > hi || hi >= SCDB_BROKER_MAX_CPUS) return -1;
        for (long i = lo; i <= hi; i++)
            if (!cpus[i]) {
                cpus[i] = 1;
                n++;
            }
        if (!*s) return n;
        if (*s++ != ',') return -1;
    }
}

const char *scdb_broker_config_key(int i)
{
    return i >= 0 && (size_t)i < SCDB_ARRAY_LEN(keys) ? keys[i].name : NULL;
}

scdb_err scdb_broker_config_get(const scdb_broker_config *c, const char *key, char *buf,
                                size_t len)
{
    const char *p = (const char *)c;
    size_t i;

    for (i = 0; i < SCDB_ARRAY_LEN(keys); i++)
        if (!strcmp(keys[i].name, key)) break;
    if (i == SCDB_ARRAY_LEN(keys)) return SCDB_ENOTFOUND;
    const struct key *d = &keys[i];
    switch (d->type) {
    case K_STR:
    case K_CPUS: snprintf(buf, len, "%s", p + d->off); break;
    case K_U64: {
        uint64_t v;
        memcpy(&v, p + d->off, sizeof v);
        snprintf(buf, len, "%llu", (unsigned long long)v);
        break;
    }
    case K_U32: {
        uint32_t v;
        memcpy(&v, p + d->off, sizeof v);
        snprintf(buf, len, "%u", v);
        break;
    }
    case K_INT: case K_BOOL: {
        int v;
        memcpy(&v, p + d->off, sizeof v);
        snprintf(buf, len, "%d", v);
        break;
    }
    case K_MODE: {
        unsigned v;
        memcpy(&v, p + d->off, sizeof v);
        snprintf(buf, len, "%04o", v);
        break;
    }
    case K_LEVEL: {
        static const char *names[] = {"debug", "info", "warn", "error", "off"};
        scdb_log_level l;
        memcpy(&l, p + d->off, sizeof l);
        snprintf(buf, len, "%s", (unsigned)l < 5 ? names[l] : "?");
        break;
    }
    case K_DEVICE: {
        scdb_device_pref dp;
        memcpy(&dp, p + d->off, sizeof dp);
        snprintf(buf, len, "%s", scdb_device_pref_name(dp));
        break;
    }
    }
    return SCDB_OK;
}

/* ------------------------------------------------------ models, pairs */

/* Room for element n of an array whose capacity is the smallest power of
 * two >= max(n, 4): it grows (doubles) when n reaches a power of two. */
static void *grow(void *arr, int n, size_t elem)
{
    if (n > 4 && (n & (n - 1))) return arr;
    if (n > 0 && n < 4) return arr;
    return realloc(arr, (size_t)(n ? 2 * n : 4) * elem);
}

static scdb_broker_model_cfg *model_cfg(scdb_broker_config *c, const char *name, int create)
{
    for (int i = 0; i < c->n_models; i++)
        if (!strcmp(c->models[i].name, name)) return &c->models[i];
    if (!create || strlen(name) >= SCDB_BROKER_NAME_MAX) return NULL;
    void *p = grow(c->models, c->n_models, sizeof *c->models);
    if (!p) return NULL;
    c->models = p;
    scdb_broker_model_cfg *m = &c->models[c->n_models++];
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", name);
    m->raw_dtype = SCDB_F16;
    return m;
}

static scdb_broker_codebook_cfg *codebook_cfg(scdb_broker_config *c, const char *name)
{
    for (int i = 0; i < c->n_codebooks; i++)
        if (!strcmp(c->codebooks[i].name, name)) return &c->codebooks[i];
    if (strlen(name) >= SCDB_BROKER_NAME_MAX) return NULL;
    void *p = grow(c->codebooks, c->n_codebooks, sizeof *c->codebooks);
    if (!p) return NULL;
    c->codebooks = p;
    scdb_broker_codebook_cfg *b = &c->codebooks[c->n_codebooks++];
    memset(b, 0, sizeof *b);
    snprintf(b->name, sizeof b->name, "%s", name);
    snprintf(b->kind, sizeof b->kind, "raw");
    b->dtype = SCDB_F16;
    return b;
}

static scdb_broker_pair_cfg *pair_cfg(scdb_broker_config *c, const char *cb, const char *cons)
{
    for (int i = 0; i < c->n_pairs; i++)
        if (!strcmp(c->pairs[i].codebook, cb) && !strcmp(c->pairs[i].consumer, cons))
            return &c->pairs[i];
    if (strlen(cb) >= SCDB_BROKER_NAME_MAX || strlen(cons) >= SCDB_BROKER_NAME_MAX) return NULL;
    void *p = grow(c->pairs, c->n_pairs, sizeof *c->pairs);
    if (!p) return NULL;
    c->pairs = p;
    scdb_broker_pair_cfg *q = &c->pairs[c->n_pairs++];
    memset(q, 0, sizeof *q);
    snprintf(q->codebook, sizeof q->codebook, "%s", cb);
    snprintf(q->consumer, sizeof q->consumer, "%s", cons);
    return q;
}

static scdb_broker_policy_cfg *policy_cfg(scdb_broker_config *c, const char *name)
{
    for (int i = 0; i < c->n_policies; i++)
        if (!strcmp(c->policies[i].name, name)) return &c->policies[i];
    if (strlen(name) >= SCDB_BROKER_NAME_MAX) return NULL;
    void *p = grow(c->policies, c->n_policies, sizeof *c->policies);
    if (!p) return NULL;
    c->policies = p;
    scdb_broker_policy_cfg *q = &c->policies[c->n_policies++];
    memset(q, 0, sizeof *q);
    snprintf(q->name, sizeof q->name, "%s", name);
    return q;
}

static int model_key(scdb_broker_model_cfg *m, const char *k, const char *v)
{
    long x;
    if (!strcmp(k, "config")) return copy_str(m->config, sizeof m->config, v);
    if (!strcmp(k, "raw_dtype")) return parse_raw_dtype(v, &m->raw_dtype);
    if (parse_int(v, 1, 1 << 24, &x)) return -1;
    if (!strcmp(k, "n_layers")) m->n_layers = (int)x;
    else if (!strcmp(k, "n_kv_heads")) m->n_kv_heads = (int)x;
    else if (!strcmp(k, "head_dim")) m->head_dim = (int)x;
    else if (!strcmp(k, "max_seq_len")) m->max_seq_len = (int)x;
    else if (!strcmp(k, "n_heads")) m->n_heads = (int)x;
    else return -1;
    return 0;
}

static int codebook_key(scdb_broker_codebook_cfg *b, const char *k, const char *v)
{
    if (!strcmp(k, "kind")) return copy_str(b->kind, sizeof b->kind, v);
    if (!strcmp(k, "model")) return copy_str(b->model, sizeof b->model, v);
    if (!strcmp(k, "file")) return copy_str(b->file, sizeof b->file, v);
    if (!strcmp(k, "dtype")) return parse_raw_dtype(v, &b->dtype);
    if (!strcmp(k, "codes_dtype")) {
        if (strcmp(v, "f16") && strcmp(v, "int8")) return -1;
        return copy_str(b->codes_dtype, sizeof b->codes_dtype, v);
    }
    return -1;
}

/* `fidelity`: a recompute setting (schema/recompute.h) or "pair" */
static int fidelity_value(char *dst, size_t len, const char *v)
{
    scdb_recompute r;
    if (scdb_recompute_parse(v, &r, NULL, 0) || scdb_recompute_check(&r, -1, NULL, 0)) return -1;
    return copy_str(dst, len, v);
}

static int consumers_key(scdb_broker_consumers_cfg *g, const char *k, const char *v)
{
    if (!strcmp(k, "fidelity")) return fidelity_value(g->fidelity, sizeof g->fidelity, v);
    if (!strcmp(k, "dirs")) return copy_str(g->dirs, sizeof g->dirs, v);
    if (!strcmp(k, "raw_dtype")) return parse_raw_dtype(v, &g->raw_dtype);
    if (!strcmp(k, "codebook")) return copy_str(g->codebook, sizeof g->codebook, v);
    if (!strcmp(k, "decoder")) return copy_str(g->decoder, sizeof g->decoder, v);
    if (!strcmp(k, "file")) return copy_str(g->file, sizeof g->file, v);
    return -1;
}

static int pair_key(scdb_broker_pair_cfg *p, const char *k, const char *v)
{
    if (!strcmp(k, "decoder")) return copy_str(p->decoder, sizeof p->decoder, v);
    if (!strcmp(k, "file")) return copy_str(p->file, sizeof p->file, v);
    if (!strcmp(k, "fidelity")) return fidelity_value(p->fidelity, sizeof p->fidelity, v);
    return -1;
}

/* ------------------------------------------------------------ ini file */

typedef struct ini_ctx {
    scdb_broker_config *c;
    char err[256];
} ini_ctx;

static int on_ini_line(void *user, const char *section, const char *name, const char *value)
{
    ini_ctx *x = user;
    char kind[32], a[SCDB_BROKER_NAME_MAX], b[SCDB_BROKER_NAME_MAX], extra[8];
    int n;

    a[0] = b[0] = 0;
    n = sscanf(section, "%31s %127s %127s %7s", kind, a, b, extra);
    if (n >= 1 && !strcmp(kind, "broker") && n == 1) {
        if (scdb_broker_config_set(x->c, name, value, x->err, sizeof x->err)) return 0;
        return 1;
    }
    if (n == 1 && !strcmp(kind, "remote")) {
        char key[80];
        scdb_err e = SCDB_ENOTFOUND;
        if (strlen(name) <= 40 && strncmp(name, "remote", 6)) {
            snprintf(key, sizeof key, "remote_%s", name);
            e = scdb_broker_config_set(x->c, key, value, x->err, sizeof x->err);
        }
        if (e == SCDB_ENOTFOUND)
            snprintf(x->err, sizeof x->err,
                     "[remote]: unknown key '%s' (cluster, user, password_file, key_prefix, "
                     "ttl, write_queue, timeout_ms)", name);
        return e ? 0 : 1;
    }
    if (n == 2 && !strcmp(kind, "model")) {
        scdb_broker_model_cfg *m = model_cfg(x->c, a, 1);
        if (!m) goto nomem;
        if (model_key(m, name, value)) goto bad;
        return 1;
    }
    if (n == 2 && !strcmp(kind, "codebook")) {
        scdb_broker_codebook_cfg *cb = codebook_cfg(x->c, a);
        if (!cb) goto nomem;
        if (codebook_key(cb, name, value)) goto bad;
        return 1;
    }
    if (n == 3 && !strcmp(kind, "pair")) {
        scdb_broker_pair_cfg *p = pair_cfg(x->c, a, b);
        if (!p) goto nomem;
        if (pair_key(p, name, value)) goto bad;
        return 1;
    }
    if (n == 2 && !strcmp(kind, "consumers")) {
        scdb_broker_consumers_cfg *g = NULL;
        for (int i = 0; i < x->c->n_groups && !g; i++)
            if (!strcmp(x->c->groups[i].name, a)) g = &x->c->groups[i];
        if (!g) {
            if (x->c->n_groups == SCDB_BROKER_MAX_GROUPS) goto nomem;
            g = &x->c->groups[x->c->n_groups++];
            memset(g, 0, sizeof *g);
            snprintf(g->name, sizeof g->name, "%s", a);
            g->raw_dtype = SCDB_F16;
        }
        if (consumers_key(g, name, value)) goto bad;
        return 1;
    }
    if (n == 2 && !strcmp(kind, "policy")) {
        scdb_broker_policy_cfg *p = policy_cfg(x->c, a);
        if (!p) goto nomem;
        if (strcmp(name, "file") || copy_str(p->file, sizeof p->file, value)) goto bad;
        return 1;
    }
    snprintf(x->err, sizeof x->err,
             "unknown section [%s] (expected [broker], [remote], [model NAME], "
             "[codebook NAME], [pair CODEBOOK CONSUMER], [consumers GROUP] or [policy NAME])", section);
    return 0;
bad:
    snprintf(x->err, sizeof x->err, "[%s]: bad key or value: %s = %s", section, name, value);
    return 0;
nomem:
    snprintf(x->err, sizeof x->err, "[%s]: out of memory or name too long", section);
    return 0;
}

static int is_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f) fclose(f);
    return f != NULL;
}

/* One path a group's glob matched: a model or adapter directory (NAME its
 * folder's name), or a GGUF model or adapter file (NAME.gguf, or the file's
 * name without an extension); anything else is not a consumer.  A model
 * entry, and a pair. */
static scdb_err add_consumer(scdb_broker_config *c, const scdb_broker_consumers_cfg *g,
                             const char *dir, char *errbuf, size_t errlen)
{
    char path[1200], name[SCDB_BROKER_NAME_MAX + 1];
    size_t n = strlen(dir);
    int is_dir = n > 0 && dir[n - 1] == '/';           /* GLOB_MARK */
    while (n > 1 && dir[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && dir[b - 1] != '/') b--;
    size_t name_end = n;
    if (is_dir) {
        snprintf(path, sizeof path, "%.*s/config.json", (int)n, dir);
        int model = is_file(path);
        snprintf(path, sizeof path, "%.*s/adapter_config.json", (int)n, dir);
        if (!model && !is_file(path)) return SCDB_OK;  /* not a model directory */
    } else {
        if (!scdb_gguf_is_file(dir)) return SCDB_OK;   /* not a GGUF file */
        if (n - b > 5 && !strcmp(dir + n - 5, ".gguf")) name_end = n - 5;
    }
    if (name_end - b >= SCDB_BROKER_NAME_MAX || n >= sizeof c->models[0].config) {
        snprintf(errbuf, errlen, "[consumers %s]: %.*s: name or path too long", g->name, (int)n, dir);
        return SCDB_ERANGE;
    }
    snprintf(name, sizeof name, "%.*s", (int)(name_end - b), dir + b);
    if (!model_cfg(c, name, 0)) {
        scdb_broker_model_cfg *m = model_cfg(c, name, 1);
        if (!m) return SCDB_ENOMEM;
        snprintf(m->config, sizeof m->config, "%.*s", (int)n, dir);
        m->raw_dtype = g->raw_dtype;
    }
    if (!g->codebook[0]) return SCDB_OK;
    char file[600] = "";
    if (g->file[0]) {                                   /* {name} -> NAME */
        const char *at = strstr(g->file, "{name}");
        if (at) snprintf(file, sizeof file, "%.*s%s%s", (int)(at - g->file), g->file, name, at + 6);
        else snprintf(file, sizeof file, "%s", g->file);
        if (!is_file(file)) return SCDB_OK;             /* no pair for it (yet) */
        if (strlen(file) >= sizeof c->pairs[0].file) {
            snprintf(errbuf, errlen, "[consumers %s]: pair file %s: path too long", g->name, file);
            return SCDB_ERANGE;
        }
    }
    for (int i = 0; i < c->n_pairs; i++)               /* a [pair] section of its own wins */
        if (!strcmp(c->pairs[i].codebook, g->codebook) && !strcmp(c->pairs[i].consumer, name)) return SCDB_OK;
    scdb_broker_pair_cfg *p = pair_cfg(c, g->codebook, name);
    if (!p) return SCDB_ENOMEM;
    snprintf(p->decoder, sizeof p->decoder, "%s", g->decoder);
    snprintf(p->file, sizeof p->file, "%s", file);
    snprintf(p->fidelity, sizeof p->fidelity, "%s", g->fidelity);
    return SCDB_OK;
}

/* Every [consumers GROUP]'s globs, in order (glob(3) sorts each). */
static scdb_err expand_groups(scdb_broker_config *c, char *errbuf, size_t errlen)
{
    for (int gi = 0; gi < c->n_groups; gi++) {
        const scdb_broker_consumers_cfg *g = &c->groups[gi];
        char pats[sizeof g->dirs], *save = NULL;
        if (!g->dirs[0]) {
            snprintf(errbuf, errlen, "[consumers %s]: no dirs = GLOB", g->name);
            return SCDB_EINVAL;
        }
        snprintf(pats, sizeof pats, "%s", g->dirs);
        for (char *pat = strtok_r(pats, " \t,", &save); pat; pat = strtok_r(NULL, " \t,", &save)) {
            glob_t gl;
            int rc = glob(pat, GLOB_MARK, NULL, &gl);   /* directories end in '/' */
            if (rc == GLOB_NOMATCH) continue;
            if (rc) {
                snprintf(errbuf, errlen, "[consumers %s]: cannot expand %s", g->name, pat);
                globfree(&gl);
                return rc == GLOB_NOSPACE ? SCDB_ENOMEM : SCDB_EIO;
            }
            scdb_err e = SCDB_OK;
            for (size_t i = 0; i < gl.gl_pathc && !e; i++) e = add_consumer(c, g, gl.gl_pathv[i], errbuf, errlen);
            globfree(&gl);
            if (e) return e;
        }
    }
    return SCDB_OK;
}

scdb_err scdb_broker_config_load(scdb_broker_config *c, const char *path, char *errbuf,
                                 size_t errlen)
{
    ini_ctx x = {.c = c};
    FILE *f = fopen(path, "r");
    int rc;

    if (!f) {
        if (errbuf) snprintf(errbuf, errlen, "%s: %s", path, strerror(errno));
        return SCDB_ENOTFOUND;
    }
    rc = ini_parse_file(f, on_ini_line, &x);
    fclose(f);
    if (rc == 0) return expand_groups(c, errbuf, errlen);
    if (errbuf) {
        if (rc > 0)
            snprintf(errbuf, errlen, "%s:%d: %s", path, rc, x.err[0] ? x.err : "syntax error");
        else
            snprintf(errbuf, errlen, "%s: cannot parse (%d)", path, rc);
    }
    return rc == -2 ? SCDB_ENOMEM : SCDB_EFORMAT;
}

scdb_err scdb_broker_config_add_model(scdb_broker_config *c, const char *spec, char *errbuf,
                                      size_t errlen)
{
    char name[SCDB_BROKER_NAME_MAX], rest[600];
    const char *eq = strchr(spec, '='), *colon = strchr(spec, ':');
    const char *sep = eq && (!colon || eq < colon) ? eq : colon;
    scdb_broker_model_cfg *m;

    if (!sep || sep == spec || (size_t)(sep - spec) >= sizeof name ||
        strlen(sep + 1) >= sizeof rest)
        goto bad;
    memcpy(name, spec, (size_t)(sep - spec));
    name[sep - spec] = 0;
    snprintf(rest, sizeof rest, "%s", sep + 1);
    if (model_cfg(c, name, 0)) {
        if (errbuf) snprintf(errbuf, errlen, "model '%s' given twice", name);
        return SCDB_EINVAL;
    }
    m = model_cfg(c, name, 1);
    if (!m) return SCDB_ENOMEM;
    if (sep == eq) {
        /* a model directory (its config.json), or a file the model loader
         * reads directly (a GGUF model or adapter) */
        if (snprintf(m->config, sizeof m->config, scdb_gguf_is_file(rest) ? "%s" : "%s/config.json", rest) >=
            (int)sizeof m->config)
            goto undo;
        return SCDB_OK;
    }
    {
        char dt[8] = "f16";
        int n = sscanf(rest, "%d:%d:%d:%d:%7s", &m->n_layers, &m->n_kv_heads, &m->head_dim,
                       &m->max_seq_len, dt);
        if (n < 3 || m->n_layers <= 0 || m->n_kv_heads <= 0 || m->head_dim <= 0 ||
            (n >= 4 && m->max_seq_len <= 0) || parse_raw_dtype(dt, &m->raw_dtype))
            goto undo;
    }
    return SCDB_OK;
undo:
    c->n_models--;
bad:
    if (errbuf)
        snprintf(errbuf, errlen,
                 "bad model spec '%s' (NAME=DIR or NAME:LAYERS:KV_HEADS:HEAD_DIM"
                 "[:MAX_SEQ[:f16|f32]])", spec);
    return SCDB_EINVAL;
}
