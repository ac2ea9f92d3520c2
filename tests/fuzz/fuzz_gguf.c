/* fuzz_gguf.c — schema/gguf.c and schema/gguf_llama.c: the GGUF reader from
 * a buffer and from a file (the same verdict), then what every loader does
 * with an accepted file: the llama hyperparameters and tensors, each
 * tensor's values in scdb's order, and, for a LoRA adapter, its factors
 * over a tiny base model written at start (explicit base).  A file the
 * reader accepts must keep its promises: keys and names found by lookup,
 * every tensor's bytes inside the file (touched, for ASan) at an offset
 * that is a multiple of the alignment, strings as long as they say, and
 * a copy through the writer that opens with the same contents. */
#include "fuzz.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf.h"
#include "gguf_llama.h"
#include "peft_adapter.h"

static char base_path[64];

static void remove_base(void) { unlink(base_path); }

/* A tiny llama base (d 8, 1 layer, 2 heads of 4, 1 KV head, d_ff 8,
 * vocab 4) for adapters to be applied over. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    static float zeros[64];
    scdb_gguf_writer *w = NULL;
    const struct { const char *n; int64_t ne0, ne1; } t[] = {
        {"token_embd.weight", 8, 4}, {"output_norm.weight", 8, 0}, {"blk.0.attn_norm.weight", 8, 0},
        {"blk.0.attn_q.weight", 8, 8}, {"blk.0.attn_k.weight", 8, 4}, {"blk.0.attn_v.weight", 8, 4},
        {"blk.0.attn_output.weight", 8, 8}, {"blk.0.ffn_norm.weight", 8, 0}, {"blk.0.ffn_gate.weight", 8, 8},
        {"blk.0.ffn_up.weight", 8, 8}, {"blk.0.ffn_down.weight", 8, 8}};
    snprintf(base_path, sizeof base_path, "/tmp/scdb-fuzz-gguf-base-%d.gguf", (int)getpid());
    FUZZ_CHECK(!scdb_gguf_writer_new(&w));
    FUZZ_CHECK(!scdb_gguf_set_str(w, "general.architecture", "llama"));
    FUZZ_CHECK(!scdb_gguf_set_u32(w, "llama.block_count", 1));
    FUZZ_CHECK(!scdb_gguf_set_u32(w, "llama.embedding_length", 8));
    FUZZ_CHECK(!scdb_gguf_set_u32(w, "llama.feed_forward_length", 8));
    FUZZ_CHECK(!scdb_gguf_set_u32(w, "llama.attention.head_count", 2));
    FUZZ_CHECK(!scdb_gguf_set_u32(w, "llama.attention.head_count_kv", 1));
    FUZZ_CHECK(!scdb_gguf_set_u32(w, "llama.context_length", 16));
    FUZZ_CHECK(!scdb_gguf_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f));
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        int64_t ne[2] = {t[i].ne0, t[i].ne1};
        FUZZ_CHECK(!scdb_gguf_add_tensor(w, t[i].n, SCDB_GGML_F32, t[i].ne1 ? 2 : 1, ne, zeros));
    }
    FUZZ_CHECK(!scdb_gguf_writer_write(w, base_path));
    scdb_gguf_writer_free(&w);
    atexit(remove_base);
    return 0;
}

static void walk(const scdb_gguf_file *f, const uint8_t *base, size_t size)
{
    volatile uint8_t sink = 0;
    for (int i = 0; i < scdb_gguf_kv_count(f); i++) {
        const scdb_gguf_kv *kv = scdb_gguf_kv_at(f, i);
        FUZZ_CHECK(kv && kv->key && kv->key[0]);
        FUZZ_CHECK(scdb_gguf_find_kv(f, kv->key) == kv);
        FUZZ_CHECK(kv->type == SCDB_GGUF_ARRAY || (kv->n == 1 && kv->elem == kv->type));
        for (uint64_t j = 0; j < kv->n && j < 64; j++) {
            if (kv->elem == SCDB_GGUF_STRING) {
                FUZZ_CHECK(kv->str && kv->str[j] && strlen(kv->str[j]) <= kv->str_len[j]);
                continue;
            }
            int64_t iv;
            double dv;
            scdb_err e = scdb_gguf_kv_int(kv, j, &iv);
            FUZZ_CHECK(e == SCDB_OK || e == SCDB_EFORMAT || e == SCDB_ERANGE);
            FUZZ_CHECK(scdb_gguf_kv_float(kv, j, &dv) == SCDB_OK || e == SCDB_ERANGE);
        }
    }
    FUZZ_CHECK(scdb_gguf_kv_at(f, scdb_gguf_kv_count(f)) == NULL);
    size_t align = scdb_gguf_alignment(f);
    FUZZ_CHECK(align && !(align & (align - 1)));
    for (int i = 0; i < scdb_gguf_tensor_count(f); i++) {
        const scdb_gguf_tensor *t = scdb_gguf_tensor_at(f, i);
        FUZZ_CHECK(t && t->name && scdb_gguf_find_tensor(f, t->name) == t);
        FUZZ_CHECK(scdb_ggml_type_name(t->type) && t->offset % align == 0);
        FUZZ_CHECK(t->n_dims >= 0 && t->n_dims <= SCDB_GGUF_MAX_DIMS);
        if (t->nbytes) {
            const uint8_t *d = t->data;
            if (base) FUZZ_CHECK(d >= base + scdb_gguf_data_offset(f) && d + t->nbytes <= base + size);
            sink ^= d[0];
            sink ^= d[t->nbytes - 1];
        }
        if (scdb_gguf_type_to_f32_ok(t->type) && t->nbytes) {
            float v[16];
            size_t n = t->nbytes / scdb_ggml_type_size(t->type);
            FUZZ_CHECK(scdb_gguf_tensor_to_f32(t, 0, n < 16 ? n : 16, v) == SCDB_OK);
        }
    }
    (void)sink;
}

/* Copied KV by KV and tensor by tensor into a writer (scdb_gguf_set_kv),
 * the image must open with the same KVs and tensors. */
static void copy(const scdb_gguf_file *f)
{
    scdb_gguf_writer *w = NULL;
    scdb_gguf_file *g = NULL;
    uint8_t *img = NULL;
    size_t len = 0;
    FUZZ_CHECK(scdb_gguf_writer_new(&w) == SCDB_OK);
    for (int i = 0; i < scdb_gguf_kv_count(f); i++) FUZZ_CHECK(scdb_gguf_set_kv(w, scdb_gguf_kv_at(f, i)) == SCDB_OK);
    for (int i = 0; i < scdb_gguf_tensor_count(f); i++) {
        const scdb_gguf_tensor *t = scdb_gguf_tensor_at(f, i);
        FUZZ_CHECK(scdb_gguf_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data) == SCDB_OK);
    }
    FUZZ_CHECK(scdb_gguf_writer_image(w, &img, &len) == SCDB_OK);
    FUZZ_CHECK(scdb_gguf_open_buffer(img, len, &g, NULL, 0) == SCDB_OK);
    FUZZ_CHECK(scdb_gguf_kv_count(g) == scdb_gguf_kv_count(f) && scdb_gguf_tensor_count(g) == scdb_gguf_tensor_count(f));
    for (int i = 0; i < scdb_gguf_tensor_count(f); i++) {
        const scdb_gguf_tensor *a = scdb_gguf_tensor_at(f, i), *b = scdb_gguf_tensor_at(g, i);
        FUZZ_CHECK(!strcmp(a->name, b->name) && a->nbytes == b->nbytes && !memcmp(a->data, b->data, a->nbytes));
    }
    scdb_gguf_close(&g);
    free(img);
    scdb_gguf_writer_free(&w);
}

/* What the model loader and the fingerprint do with it. */
static void llama(const scdb_gguf_file *f, const char *path)
{
    scdb_gguf_llama_hparams hp;
    scdb_gguf_llama_tensor *v = NULL;
    int n = 0;
    char err[256];
    if (scdb_gguf_is_adapter(f)) {
        scdb_adapter *a = NULL;
        if (scdb_adapter_open_ex(path, NULL, base_path, &a, err, sizeof err) == SCDB_OK) {
            const int64_t shape[SCDB_LORA_N_MODULES][2] = {{8, 8}, {4, 8}, {4, 8}, {8, 8}, {8, 8}, {8, 8}, {8, 8}};
            if (scdb_adapter_check_base(a, 1, shape, err, sizeof err) == SCDB_OK) {
                float w[64];
                for (int i = 0; i < a->n_t; i++) {
                    const scdb_lora_target *t = &a->t[i];
                    memset(w, 0, sizeof w);
                    FUZZ_CHECK(scdb_adapter_merge(a, t, w, shape[t->module][0], shape[t->module][1], w) == SCDB_OK);
                }
            }
            scdb_adapter_close(&a);
        }
        FUZZ_CHECK(a == NULL);
        return;
    }
    if (scdb_gguf_llama_hparams_read(f, &hp, err, sizeof err) ||
        scdb_gguf_llama_tensors(f, &hp, &v, &n, err, sizeof err))
        return;
    for (int i = 0; i < n; i++) {
        size_t numel = (size_t)v[i].rows * (size_t)(v[i].cols ? v[i].cols : 1);
        FUZZ_CHECK(numel * scdb_ggml_type_size(v[i].t->type) == v[i].t->nbytes);
        float *dst = malloc(numel * sizeof *dst + 1);
        FUZZ_CHECK(dst && scdb_gguf_llama_read(&v[i], dst) == SCDB_OK);
        free(dst);
    }
    free(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    scdb_gguf_file *f = NULL, *g = NULL;
    char err[256], path[64];
    scdb_err e1, e2;

    e1 = scdb_gguf_open_buffer(data, size, &f, err, sizeof err);
    FUZZ_CHECK((e1 == SCDB_OK) == (f != NULL));
    if (f) {
        walk(f, data, size);
        copy(f);
    }
    scdb_gguf_close(&f);

    /* the same bytes as a file: same verdict */
    int fd = fuzz_memfd(data, size, path, sizeof path);
    e2 = scdb_gguf_open(path, &g, err, sizeof err);
    FUZZ_CHECK(e2 == e1 || (size == 0 && e2 != SCDB_OK));
    if (g) {
        walk(g, NULL, 0);
        llama(g, path);
    }
    scdb_gguf_close(&g);
    close(fd);
    return 0;
}
