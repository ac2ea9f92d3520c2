/* llama_ctx.c — loading llama.cpp's backends, the layout probe and
 * self-test, and reading / writing a sequence through its state blob. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf_ggml.h"
#include "llama_int.h"

double ll_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static scdb_err init_err = SCDB_OK;
static char init_msg[LL_ERR_MAX];
static int log_all;

static void quiet_log(enum ggml_log_level level, const char *text, void *ud)
{
    (void)ud;
    if (log_all || level == GGML_LOG_LEVEL_WARN || level == GGML_LOG_LEVEL_ERROR)
        fputs(text, stderr);
}

static void do_init(void)
{
    const char *e = getenv("SCDB_LLAMA_LOG");
    log_all = e && *e && strcmp(e, "0") != 0;
    llama_log_set(quiet_log, NULL);
    scdb_gguf_ggml_install();     /* quantized GGUF models through ggml */
    char dir[4096] = "";
    const char *env = getenv("SCDB_LLAMA_LIBDIR");
    if (env && *env) {
        snprintf(dir, sizeof dir, "%s", env);
    } else {
        /* the folder libllama was loaded from: the CPU backends sit beside it */
        Dl_info info;
        if (dladdr((void *)llama_backend_init, &info) && info.dli_fname) {
            snprintf(dir, sizeof dir, "%s", info.dli_fname);
            char *slash = strrchr(dir, '/');
            if (slash)
                *slash = 0;
            else
                snprintf(dir, sizeof dir, ".");
        }
    }
    ggml_backend_load_all_from_path(dir);
    llama_backend_init();
    if (ggml_backend_dev_count() == 0) {
        init_err = SCDB_EUNSUPPORTED;
        snprintf(init_msg, sizeof init_msg,
                 "llama.cpp found no backend in '%s' (libggml-cpu-*.so; set SCDB_LLAMA_LIBDIR "
                 "to the folder of the pinned release's libraries)", dir);
    }
}

scdb_err scdb_llama_init(char *errbuf, size_t errlen)
{
    pthread_once(&init_once, do_init);
    if (init_err)
        ll_msg(errbuf, errlen, "%s", init_msg);
    return init_err;
}

int ll_layer_of(const char *t, const char *prefix)
{
    size_t k = strlen(prefix);
    if (strncmp(t, prefix, k) != 0 || t[k] != '-' || !t[k + 1])
        return -1;
    int l = 0;
    for (const char *s = t + k + 1; *s; s++) {
        if (*s < '0' || *s > '9' || l > 100000)
            return -1;
        l = l * 10 + (*s - '0');
    }
    return l;
}

int ll_take_rows(const struct ggml_tensor *t, float *layer_rows, int dim, size_t n, size_t *filled)
{
    int64_t d = t->ne[0], rows = ggml_nelements(t) / (d ? d : 1);
    if (t->type != GGML_TYPE_F32 || d != dim || !ggml_is_contiguous(t) || *filled + (size_t)rows > n)
        return -1;
    ggml_backend_tensor_get(t, layer_rows + *filled * (size_t)dim, 0, (size_t)rows * (size_t)d * sizeof(float));
    *filled += (size_t)rows;
    return 0;
}

int ll_seq_ok(struct llama_context *ctx, llama_seq_id seq, char *errbuf, size_t errlen)
{
    uint32_t ns = llama_n_seq_max(ctx);
    if (seq >= 0 && (uint32_t)seq < ns)
        return 1;
    ll_msg(errbuf, errlen, "sequence %d: the context has sequences 0 to %u (llama_n_seq_max)", seq,
           ns - 1);
    return 0;
}

scdb_err scdb_llama_decode(struct llama_context *ctx, llama_seq_id seq, const llama_token *tokens,
                           size_t n, llama_pos pos0, int all_logits)
{
    if (!ctx || (!tokens && n) || !ll_seq_ok(ctx, seq, NULL, 0))
        return SCDB_EINVAL;
    uint32_t nb = llama_n_batch(ctx);
    if (nb == 0)
        nb = 512;
    if (all_logits && n > nb)     /* llama.cpp keeps the last decode's logits only */
        return SCDB_EINVAL;
    /* a batch of what this call decodes, not n_batch: llama_batch_init
     * allocates a seq_id array per token (a step of one token paid ~18 us
     * for 512 of them) */
    llama_batch b = llama_batch_init((int32_t)(n < nb ? (n ? n : 1) : nb), 0, 1);
    scdb_err err = SCDB_OK;
    for (size_t i = 0; i < n && !err; i += nb) {
        size_t m = n - i < nb ? n - i : nb;
        b.n_tokens = (int32_t)m;
        for (size_t j = 0; j < m; j++) {
            b.token[j] = tokens[i + j];
            b.pos[j] = pos0 + (llama_pos)(i + j);
            b.n_seq_id[j] = 1;
            b.seq_id[j][0] = seq;
            b.logits[j] = all_logits || i + j == n - 1;
        }
        if (llama_decode(ctx, b) != 0)
            err = SCDB_EIO;
    }
    llama_batch_free(b);
    return err;
}

static int model_shape(struct llama_context *ctx, scdb_llama_layout *L, char *errbuf,
                       size_t errlen)
{
    const struct llama_model *m = llama_get_model(ctx);
    int n_head = llama_model_n_head(m), n_embd = llama_model_n_embd(m);
    L->n_layer = llama_model_n_layer(m);
    L->n_kv_heads = llama_model_n_head_kv(m);
    if (n_head <= 0 || L->n_kv_heads <= 0 || n_embd % n_head) {
        ll_msg(errbuf, errlen, "model with %d heads, %d KV heads, width %d: not a llama KV shape",
               n_head, L->n_kv_heads, n_embd);
        return 0;
    }
    L->head_dim = n_embd / n_head;
    return 1;
}

scdb_err scdb_llama_probe(struct llama_context *ctx, llama_seq_id seq, scdb_llama_layout *out,
                          char *errbuf, size_t errlen)
{
    scdb_err err = scdb_llama_init(errbuf, errlen);
    if (err)
        return err;
    if (!ctx || !out)
        return SCDB_EINVAL;
    if (!ll_seq_ok(ctx, seq, errbuf, errlen))
        return SCDB_EINVAL;
    llama_memory_t mem = llama_get_memory(ctx);
    if (llama_memory_seq_pos_max(mem, seq) >= 0) {
        ll_msg(errbuf, errlen, "sequence %d is not empty: the probe needs an empty one", seq);
        return SCDB_EBUSY;
    }
    scdb_llama_layout L = {0};
    if (!model_shape(ctx, &L, errbuf, errlen))
        return SCDB_EUNSUPPORTED;
    uint8_t *blob = NULL, *again = NULL;
    scdb_kv_cache *c = NULL;
    llama_token t0 = 0;
    if (scdb_llama_decode(ctx, seq, &t0, 1, 0, 0)) {
        ll_msg(errbuf, errlen, "llama_decode of one token into sequence %d failed", seq);
        err = SCDB_EIO;
        goto done;
    }
    size_t n = llama_state_seq_get_size(ctx, seq);
    blob = malloc(n ? n : 1);
    if (!blob) {
        err = SCDB_ENOMEM;
        goto done;
    }
    size_t got = llama_state_seq_get_data(ctx, blob, n, seq);
    int strm = -1;
    if ((err = ll_layout_from_blob(blob, got, &L, &strm, errbuf, errlen)))
        goto done;
    if (L.n_stream > 1 && strm != seq) {
        err = SCDB_EMISMATCH;
        ll_msg(errbuf, errlen, "sequence %d's cells are in stream %d of %d, not in its own (release "
               "%s's layout?)", seq, strm, L.n_stream, SCDB_LLAMA_RELEASE);
        goto done;
    }
    /* the round trip: parse, write again, compare bytes, set back */
    char m2[LL_ERR_MAX];
    if ((err = scdb_kv_cache_new(L.n_layer, L.n_kv_heads, L.head_dim, 1, &c)))
        goto done;
    if ((err = scdb_llama_blob_read(&L, blob, got, c, m2, sizeof m2))) {
        err = SCDB_EMISMATCH;
        ll_msg(errbuf, errlen, "llama.cpp's sequence state does not parse as release %s's layout: %s",
               SCDB_LLAMA_RELEASE, m2);
        goto done;
    }
    size_t need = scdb_llama_blob_bytes(&L, 1), len = 0;
    again = malloc(need);
    if (!again) {
        err = SCDB_ENOMEM;
        goto done;
    }
    if ((err = scdb_llama_blob_write(&L, seq, c, 1, again, need, &len)) || len != got ||
        memcmp(again, blob, got) != 0) {
        size_t at = 0;
        while (at < len && at < got && again[at] == blob[at])
            at++;
        err = SCDB_EMISMATCH;
        ll_msg(errbuf, errlen, "the blob scdb writes differs from llama.cpp's own at byte %zu "
               "(sizes %zu and %zu): the loaded llama.cpp is not release %s's layout", at, len, got,
               SCDB_LLAMA_RELEASE);
        goto done;
    }
    llama_memory_seq_rm(mem, seq, -1, -1);
    if (llama_state_seq_set_data(ctx, again, len, seq) != len) {
        err = SCDB_EMISMATCH;
        ll_msg(errbuf, errlen, "llama.cpp refused the blob it had written (release %s's layout)",
               SCDB_LLAMA_RELEASE);
        goto done;
    }
    *out = L;
done:
    llama_memory_seq_rm(mem, seq, -1, -1);
    scdb_kv_cache_free(&c);
    free(blob);
    free(again);
    return err;
}

scdb_err scdb_llama_seq_read(struct llama_context *ctx, const scdb_llama_layout *L,
                             llama_seq_id seq, scdb_kv_cache *dst, char *errbuf, size_t errlen)
{
    if (!ctx || !L || !dst)
        return SCDB_EINVAL;
    if (!ll_seq_ok(ctx, seq, errbuf, errlen))
        return SCDB_EINVAL;
    size_t n = llama_state_seq_get_size(ctx, seq);
    uint8_t *blob = malloc(n ? n : 1);
    if (!blob)
        return SCDB_ENOMEM;
    size_t got = llama_state_seq_get_data(ctx, blob, n, seq);
    scdb_err err;
    if (!got) {
        ll_msg(errbuf, errlen, "llama_state_seq_get_data wrote nothing for sequence %d", seq);
        err = SCDB_EIO;
    } else {
        err = scdb_llama_blob_read(L, blob, got, dst, errbuf, errlen);
    }
    free(blob);
    return err;
}

scdb_err ll_seq_write(struct llama_context *ctx, const scdb_llama_layout *L, llama_seq_id seq,
                      const scdb_kv_cache *c, int n, uint8_t **buf, size_t *cap, char *errbuf,
                      size_t errlen)
{
    if (!ctx || !L || !c || !buf || !cap)
        return SCDB_EINVAL;
    if (!ll_seq_ok(ctx, seq, errbuf, errlen))
        return SCDB_EINVAL;
    if (n == 0) {                 /* a blob of no cells: llama.cpp leaves the sequence as is */
        llama_memory_seq_rm(llama_get_memory(ctx), seq, -1, -1);
        return SCDB_OK;
    }
    size_t need = scdb_llama_blob_bytes(L, n), len = 0;
    if (*cap < need) {
        uint8_t *nb = realloc(*buf, need);
        if (!nb)
            return SCDB_ENOMEM;
        *buf = nb;
        *cap = need;
    }
    scdb_err err = scdb_llama_blob_write(L, seq, c, n, *buf, *cap, &len);
    if (err) {
        ll_msg(errbuf, errlen, "cannot write the blob: %s", scdb_strerror(err));
    } else if (llama_state_seq_set_data(ctx, *buf, len, seq) != len) {
        err = SCDB_EMISMATCH;
        ll_msg(errbuf, errlen, "llama_state_seq_set_data refused %d tokens for sequence %d (a "
               "context of %u cells?)", n, seq, llama_n_ctx(ctx));
    }
    return err;
}

scdb_err scdb_llama_seq_write(struct llama_context *ctx, const scdb_llama_layout *L,
                              llama_seq_id seq, const scdb_kv_cache *c, int n, char *errbuf,
                              size_t errlen)
{
    uint8_t *buf = NULL;
    size_t cap = 0;
    scdb_err err = ll_seq_write(ctx, L, seq, c, n, &buf, &cap, errbuf, errlen);
    free(buf);
    return err;
}

scdb_err ll_register(const char *endpoint, int timeout_ms, scdb_role role, const char *model,
                     const char *codebook, const char *model_path, const char *adapter_path,
                     scdb **h, scdb_info *info, char fp[33], char *errbuf, size_t errlen)
{
    scdb_err err;
    fp[0] = 0;
    *h = NULL;
    /* the weights the broker checks the pair (or codebook) against; a GGUF
     * adapter's are base + adapter merged */
    if (model_path && (err = adapter_path ? scdb_weights_fingerprint_adapter(model_path, adapter_path,
                                                                             fp, errbuf, errlen)
                                          : scdb_weights_fingerprint(model_path, fp, errbuf, errlen)))
        return err;
    scdb_opts o = {0};
    o.endpoint = endpoint;
    o.timeout_ms = timeout_ms;
    o.name = model;
    if ((err = scdb_connect(&o, h))) {
        ll_msg(errbuf, errlen, "%s", scdb_connect_error());
        return err;
    }
    if ((fp[0] && (err = scdb_set_weights_fp(*h, fp))) ||
        (err = scdb_register(*h, role, model, codebook, info))) {
        ll_msg(errbuf, errlen, "%s", scdb_last_error(*h));
        scdb_close(h);
    }
    return err;
}

/* The CPU backend is a plugin (ggml_backend_load_all_from_path): its
 * thread-pool functions are reached through its registry, as llama.cpp's
 * own tools do. */
typedef struct ggml_threadpool *(*ll_pool_new_fn)(struct ggml_threadpool_params *);
typedef void (*ll_pool_free_fn)(struct ggml_threadpool *);

static void *cpu_proc(const char *name)
{
    ggml_backend_dev_t dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    ggml_backend_reg_t reg = dev ? ggml_backend_dev_backend_reg(dev) : NULL;
    return reg ? ggml_backend_reg_get_proc_address(reg, name) : NULL;
}

struct ggml_threadpool *ll_pool_new(int n_threads)
{
    ll_pool_new_fn fn = (ll_pool_new_fn)cpu_proc("ggml_threadpool_new");
    if (!fn || n_threads < 1)
        return NULL;
    struct ggml_threadpool_params tp = ggml_threadpool_params_default(n_threads);
    return fn(&tp);
}

void ll_pool_free(struct ggml_threadpool *tp)
{
    ll_pool_free_fn fn = tp ? (ll_pool_free_fn)cpu_proc("ggml_threadpool_free") : NULL;
    if (fn)
        fn(tp);
}

struct ggml_threadpool *scdb_llama_threadpool_new(int n_threads)
{
    if (scdb_llama_init(NULL, 0))
        return NULL;
    return ll_pool_new(n_threads);
}

void scdb_llama_threadpool_free(struct ggml_threadpool *tp) { ll_pool_free(tp); }
