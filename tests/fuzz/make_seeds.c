/* make_seeds.c — writes the fuzz targets' seed inputs: small valid files
 * and request sequences (tests/fuzz/README.md).  Not a test; run once after
 * a format changes and commit what it writes:
 *
 *   build/tests/fuzz/fuzz_make_seeds tests/fuzz
 *
 * It writes DIR/seeds/{codebook,pair,policy}.safetensors (an SCD codebook
 * and pair calibrated on two tiny random models of 2 layers, d_model 16,
 * and a small DistillCache network: the files the wire target's broker and
 * the pair target load) and DIR/corpus/TARGET/seed-* for every target.
 * Inputs the fuzzers found that crashed are kept beside them as
 * corpus/TARGET/crash-* and are never rewritten here. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codec.h"
#include "evict.h"
#include "gguf.h"
#include "evict_train.h"
#include "lookup_index.h"
#include "model.h"
#include "safetensors.h"
#include "scdb.pb-c.h"
#include "store.h"
#include "wire.h"
#include "wire_records.h"

static const char *root;

static void die(const char *what)
{
    fprintf(stderr, "fuzz_make_seeds: %s\n", what);
    exit(1);
}

static void write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f)) die(path);
}

static void seed(const char *target, const char *name, const void *p, size_t n)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/corpus/%s", root, target);
    scdb_mkdir_p(path, 0755);
    snprintf(path, sizeof path, "%s/corpus/%s/seed-%s", root, target, name);
    write_bytes(path, p, n);
}

static void seed_file(const char *target, const char *name, const char *src)
{
    char *text = NULL;
    size_t len = 0;
    if (scdb_read_file(src, 64u << 20, &text, &len)) die(src);
    seed(target, name, text, len);
    free(text);
}

/* ------------------------------------------------------------ tiny models */

static uint64_t rng = 88172645463325252ull;   /* scdb_xorshift_f32 */

/* A random llama-style model of 2 layers, d_model 16 (4 heads, 2 KV heads
 * of 4), d_ff 24, in dir; perturb > 0 draws a fine-tuned-like variant. */
static void write_model(const char *dir, const char *name, float perturb)
{
    static float store[32][256 * 16];
    char path[1024], nm[128];
    const struct { const char *n; int64_t d0, d1; float scale; } top[] = {
        {"tok_embeddings.weight", 256, 16, 1.0f}, {"norm.weight", 16, 0, 0.0f},
        {"output.weight", 256, 16, 0.3f}};
    const struct { const char *n; int64_t d0, d1; float scale; } lay[] = {
        {"attention_norm.weight", 16, 0, 0.0f}, {"attention.wq.weight", 16, 16, 0.4f},
        {"attention.wk.weight", 8, 16, 0.4f}, {"attention.wv.weight", 8, 16, 0.4f},
        {"attention.wo.weight", 16, 16, 0.3f}, {"ffn_norm.weight", 16, 0, 0.0f},
        {"feed_forward.w1.weight", 24, 16, 0.3f}, {"feed_forward.w2.weight", 16, 24, 0.3f},
        {"feed_forward.w3.weight", 24, 16, 0.3f}};
    scdb_st_writer *w;
    FILE *f;
    int nb = 0;

    scdb_mkdir_p(dir, 0755);
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (!(f = fopen(path, "w"))) die(path);
    fprintf(f, "{\"name\":\"%s\",\"domain\":\"english\",\"arch\":\"llama\",\"vocab_size\":256,"
               "\"d_model\":16,\"n_layers\":2,\"n_heads\":4,\"n_kv_heads\":2,\"head_dim\":4,"
               "\"d_ff\":24,\"max_seq_len\":64,\"rope_theta\":10000.0,\"norm_eps\":1e-5,"
               "\"parent\":null}", name);
    fclose(f);
    if (scdb_st_writer_new(&w)) die("writer");
    rng = 88172645463325252ull;
    for (int l = -1; l < 2; l++)
        for (int i = 0; i < (l < 0 ? 3 : 9); i++) {
            int64_t shape[2] = {l < 0 ? top[i].d0 : lay[i].d0, l < 0 ? top[i].d1 : lay[i].d1};
            float scale = l < 0 ? top[i].scale : lay[i].scale;
            int ndim = shape[1] > 0 ? 2 : 1;
            size_t numel = (size_t)shape[0] * (ndim == 2 ? (size_t)shape[1] : 1);
            if (l < 0) snprintf(nm, sizeof nm, "%s", top[i].n);
            else snprintf(nm, sizeof nm, "layers.%d.%s", l, lay[i].n);
            for (size_t k = 0; k < numel; k++) {
                float v = scale == 0.0f ? 1.0f + 0.1f * scdb_xorshift_f32(&rng) : scale * scdb_xorshift_f32(&rng);
                store[nb][k] = v + perturb * (scale == 0.0f ? 0.1f : scale) * scdb_xorshift_f32(&rng);
            }
            if (scdb_st_writer_add(w, nm, SCDB_F32, ndim, shape, store[nb])) die(nm);
            nb++;
        }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (scdb_st_writer_write(w, path)) die(path);
    scdb_st_writer_free(&w);
}

/* ------------------------------------------------------------ gguf */

/* The tiny model as llama.cpp's GGUF (scdb export-gguf's writer), a file
 * with every KV type and a quantized tensor, and a LoRA adapter over the
 * fuzz target's own tiny base (fuzz_gguf.c: d 8, 2 heads of 4, 1 KV head). */
static void write_gguf_seeds(const char *tmp)
{
    char dir[512], path[1024], err[256];
    scdb_model *m = NULL;
    uint8_t *img = NULL;
    size_t len = 0;
    scdb_gguf_writer *w = NULL;

    snprintf(dir, sizeof dir, "%s/tiny", tmp);
    snprintf(path, sizeof path, "%s/tiny.gguf", tmp);
    if (scdb_model_load(dir, &m, err, sizeof err) || scdb_model_export_gguf(m, path, SCDB_F16, err, sizeof err))
        die(err);
    scdb_model_free(&m);
    seed_file("gguf", "tiny-model-f16", path);

    static float f32v[8] = {1, -2, 3, -4, 5, -6, 7, -8};
    static uint8_t q8[34];
    const char *strs[3] = {"a", "", "\\x00"};
    int32_t i32s[2] = {-1, 7};
    if (scdb_gguf_writer_new(&w)) die("writer");
    int64_t ne[2] = {4, 2}, nq[1] = {32};
    if (scdb_gguf_set_str(w, "general.name", "sample") || scdb_gguf_set_u32(w, "general.alignment", 16) ||
        scdb_gguf_set_u64(w, "k.u64", 1ull << 63) || scdb_gguf_set_f64(w, "k.f64", -0.5) ||
        scdb_gguf_set_bool(w, "k.bool", 1) || scdb_gguf_set_arr_str(w, "k.strs", strs, 3) ||
        scdb_gguf_set_arr(w, "k.i32s", SCDB_GGUF_I32, i32s, 2) ||
        scdb_gguf_add_tensor(w, "a", SCDB_GGML_F32, 2, ne, f32v) ||
        scdb_gguf_add_tensor(w, "q", SCDB_GGML_Q8_0, 1, nq, q8) || scdb_gguf_writer_image(w, &img, &len))
        die("gguf sample");
    seed("gguf", "sample-types", img, len);
    free(img);
    scdb_gguf_writer_free(&w);

    static float fa[8 * 2], fb[8 * 2];
    for (int i = 0; i < 16; i++) fa[i] = fb[i] = 0.01f * (float)(i - 8);
    if (scdb_gguf_writer_new(&w)) die("writer");
    int64_t na[2] = {8, 2}, nbq[2] = {2, 8}, nbk[2] = {2, 4};
    if (scdb_gguf_set_str(w, "general.architecture", "llama") || scdb_gguf_set_str(w, "general.type", "adapter") ||
        scdb_gguf_set_str(w, "adapter.type", "lora") || scdb_gguf_set_f32(w, "adapter.lora.alpha", 4.0f) ||
        scdb_gguf_set_u32(w, "general.base_model.count", 1) ||
        scdb_gguf_set_str(w, "general.base_model.0.name", "base") ||
        scdb_gguf_add_tensor(w, "blk.0.attn_q.weight.lora_a", SCDB_GGML_F32, 2, na, fa) ||
        scdb_gguf_add_tensor(w, "blk.0.attn_q.weight.lora_b", SCDB_GGML_F32, 2, nbq, fb) ||
        scdb_gguf_add_tensor(w, "blk.0.attn_k.weight.lora_a", SCDB_GGML_F32, 2, na, fa) ||
        scdb_gguf_add_tensor(w, "blk.0.attn_k.weight.lora_b", SCDB_GGML_F32, 2, nbk, fb) ||
        scdb_gguf_writer_image(w, &img, &len))
        die("gguf adapter");
    seed("gguf", "tiny-adapter", img, len);
    free(img);
    scdb_gguf_writer_free(&w);
}

static void write_codec_seeds(const char *tmp)
{
    char d1[512], d2[512], path[1024], err[256];
    scdb_model *prod = NULL, *cons = NULL;
    scdb_calib *c = NULL;
    scdb_codebook *cb = NULL;
    scdb_pair *p = NULL;
    unsigned char *text;
    size_t text_len = 0;
    int added = 0, cand[1] = {1};
    scdb_calib_opts o = {.window = 48, .eval_prefix = 40, .eval_cont = 12, .sample_stride = 2};
    scdb_cb_fit f = {.r_k = 2, .r_v = 3, .r_h = 4, .n_candidates = 1, .candidates = cand};
    scdb_pair_fit pf = {.n_patch = 1, .hidden = 8, .steps = 50, .batch = 32};
    const scdb_model *cs[1];

    snprintf(d1, sizeof d1, "%s/tiny", tmp);
    snprintf(d2, sizeof d2, "%s/cons", tmp);
    write_model(d1, "tiny", 0.0f);
    write_model(d2, "cons", 0.25f);
    if (scdb_model_load(d1, &prod, err, sizeof err) || scdb_model_load(d2, &cons, err, sizeof err))
        die(err);
    if (scdb_read_file(SCDB_DATA_DIR "/heldout/english.txt", 1 << 20, (char **)&text, &text_len))
        die("data/heldout/english.txt");
    cs[0] = cons;
    if (scdb_calib_new(prod, cs, 1, &o, &c) ||
        scdb_calib_add_text(c, text, text_len / 2 < 12000 ? text_len / 2 : 12000, 200, &added))
        die("calibration");
    for (int i = 0; i < 2; i++)
        if (scdb_calib_add_eval(c, -1, text + text_len / 2 + (size_t)i * 100, 60)) die("eval");
    if (scdb_calib_fit_codebook(c, &f, &cb) || scdb_calib_fit_pair(c, cb, 0, &pf, &p))
        die("fit");
    snprintf(path, sizeof path, "%s/seeds", root);
    scdb_mkdir_p(path, 0755);
    snprintf(path, sizeof path, "%s/seeds/codebook.safetensors", root);
    if (scdb_codebook_save(cb, path)) die(path);
    seed_file("codebook", "tiny", path);
    snprintf(path, sizeof path, "%s/seeds/pair.safetensors", root);
    if (scdb_pair_save(p, path)) die(path);
    seed_file("pair", "tiny", path);
    seed_file("safetensors", "pair", path);
    scdb_pair_free(&p);
    scdb_codebook_free(&cb);
    scdb_calib_free(&c);
    scdb_model_free(&prod);
    scdb_model_free(&cons);
    free(text);
}

static void write_policy_seeds(void)
{
    scdb_evict_mlp *m = NULL;
    char path[1024];
    const char *k[1] = {"trained_on"}, *v[1] = {"fuzz seed (random weights)"};

    if (scdb_evict_mlp_new(4, 1, &m)) die("mlp");
    snprintf(path, sizeof path, "%s/seeds/policy.safetensors", root);
    if (scdb_evict_mlp_save(m, path, k, v, 1)) die(path);
    seed_file("policy", "mlp4", path);
    seed_file("safetensors", "policy", path);
    scdb_evict_mlp_free(&m);
}

static void write_safetensors_seeds(const char *tmp)
{
    float a[6] = {1, 2, 3, 4, 5, 6};
    uint16_t b[4] = {0x3c00, 0x4000, 0, 0x8000};
    int32_t c[3] = {-1, 0, 7};
    int64_t sa[2] = {2, 3}, sb[1] = {4}, sc[1] = {3}, s0[1] = {0};
    char path[1024];
    scdb_st_writer *w;

    if (scdb_st_writer_new(&w)) die("writer");
    scdb_st_writer_add(w, "a", SCDB_F32, 2, sa, a);
    scdb_st_writer_add(w, "b.f16", SCDB_F16, 1, sb, b);
    scdb_st_writer_add(w, "c", SCDB_I32, 1, sc, c);
    scdb_st_writer_add(w, "empty", SCDB_F32, 1, s0, NULL);
    scdb_st_writer_add(w, "scalar", SCDB_F32, 0, NULL, a);
    scdb_st_writer_meta(w, "format", "fuzz");
    scdb_st_writer_meta(w, "note", "two keys");
    snprintf(path, sizeof path, "%s/small.safetensors", tmp);
    if (scdb_st_writer_write(w, path)) die(path);
    seed_file("safetensors", "small", path);
    scdb_st_writer_free(&w);
    {   /* header only, no tensors */
        const char hdr[] = "{\"__metadata__\":{\"k\":\"v\"}}    ";
        uint8_t buf[8 + sizeof hdr - 1];
        uint64_t n = sizeof hdr - 1;
        memcpy(buf, &n, 8);
        memcpy(buf + 8, hdr, n);
        seed("safetensors", "meta-only", buf, sizeof buf);
    }
}

/* ------------------------------------------------------------ block values */

static void write_block_value_seeds(void)
{
    static uint8_t payload[256], value[1024];
    scdb_block_info info;
    size_t len;

    for (size_t i = 0; i < sizeof payload; i++) payload[i] = (uint8_t)(i * 7);
    memset(&info, 0, sizeof info);
    for (int i = 0; i < 16; i++) info.key.b[i] = (uint8_t)(i + 1);
    info.token_count = 4;
    info.payload_dtype = SCDB_F16;
    info.payload_len = sizeof payload;
    if (scdb_block_value_encode(&info, payload, value, sizeof value, &len)) die("encode 0");
    seed("block_value", "block0", value, len);
    info.block_index = 3;
    for (int i = 0; i < 16; i++) info.parent.b[i] = (uint8_t)(0xf0 - i);
    info.n_sections = 4;
    for (int i = 0; i < 4; i++) info.section_off[i] = (uint64_t)i * 64;
    if (scdb_block_value_encode(&info, payload, value, sizeof value, &len)) die("encode 3");
    seed("block_value", "block3-sections", value, len);
    info.payload_len = 0;
    info.n_sections = 0;
    if (scdb_block_value_encode(&info, payload, value, sizeof value, &len)) die("encode empty");
    seed("block_value", "empty", value, len);
}

/* ------------------------------------------------------------ config */

static void write_config_seeds(void)
{
    char ini[4096];
    int n = snprintf(ini, sizeof ini, "[broker]\n" WR_CONFIG_FMT, "/nonexistent", "/nonexistent",
                     "/nonexistent");
    seed("config", "wire-broker", ini, (size_t)n);
    seed_file("config", "example", SCDB_SOURCE_DIR "/broker/scdb-broker.example.ini");
    seed("config", "model-spec", "m:2:2:4:64:f32", 14);
    seed("config", "model-dir", "base=data/models/base", 21);
    seed("config", "key-value", "hot-capacity=64MiB", 18);
}

/* ------------------------------------------------------------ lookup index */

static void write_lookup_seeds(void)
{
    static uint8_t img[1 + SCDB_LIX_HEADER_BYTES + 8 * SCDB_LIX_SLOT_BYTES];
    scdb_lix_header *h = (scdb_lix_header *)(img + 1);
    scdb_lix_slot *s = (scdb_lix_slot *)(img + 1 + SCDB_LIX_HEADER_BYTES);

    h->magic = SCDB_LIX_MAGIC;
    h->version = SCDB_LIX_VERSION;
    h->header_bytes = SCDB_LIX_HEADER_BYTES;
    h->slot_bytes = SCDB_LIX_SLOT_BYTES;
    h->block_tokens = 64;
    h->capacity = SCDB_LIX_MIN_CAPACITY;
    h->instance = 42;
    h->state = SCDB_LIX_LIVE;
    h->max_probe = 1;
    h->live = 5;
    h->deleted = 1;
    for (int i = 0; i < 6; i++) {
        /* keys whose first word picks slots 0..5 */
        s[i].k0 = (uint64_t)i | 0x1234000000000000ull;
        s[i].k1 = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
        s[i].tag = i == 4 ? SCDB_LIX_DELETED : SCDB_LIX_USED;
    }
    img[0] = 0;
    seed("lookup_index", "live", img, sizeof img);
    img[0] = 2;
    h->state = SCDB_LIX_RETIRED;
    snprintf(h->next, sizeof h->next, "/scdb-lix-next");
    seed("lookup_index", "retired", img, sizeof img);
}

/* ------------------------------------------------------------ wire */

typedef struct rb {
    uint8_t buf[1 << 16];
    size_t n;
} rb;

static void rb_put(rb *o, const void *p, size_t n)
{
    if (o->n + n > sizeof o->buf) die("wire seed too long");
    memcpy(o->buf + o->n, p, n);
    o->n += n;
}

static void rb_u16(rb *o, size_t v)
{
    uint8_t b[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    if (v > 0xffff) die("record too long");
    rb_put(o, b, 2);
}

static uint64_t next_id = 1;

/* A stamped request of client ctl (WR_STAMP added) with payload frames. */
static void rec(rb *o, uint8_t ctl, Scdb__Request *r, int np, const void *const *pl,
                const size_t *pll)
{
    uint8_t buf[8192], h[2] = {(uint8_t)(ctl | WR_STAMP), (uint8_t)np};
    size_t n;

    r->version = SCDB_PROTO_VERSION;
    r->id = next_id++;
    n = scdb__request__get_packed_size(r);
    if (n > sizeof buf) die("request too long");
    scdb__request__pack(r, buf);
    rb_put(o, h, 2);
    rb_u16(o, n);
    rb_put(o, buf, n);
    for (int i = 0; i < np; i++) {
        rb_u16(o, pll[i]);
        rb_put(o, pl[i], pll[i]);
    }
}

static void rec_raw(rb *o, const void *p, size_t n)
{
    uint8_t h[2] = {0, 0};
    rb_put(o, h, 2);
    rb_u16(o, n);
    rb_put(o, p, n);
}

static void rec_write(rb *o, uint8_t arena, uint32_t off, const void *d, size_t n)
{
    uint8_t h[2] = {WR_WRITE, 0}, a[5] = {arena, (uint8_t)off, (uint8_t)(off >> 8),
                                         (uint8_t)(off >> 16), (uint8_t)(off >> 24)};
    rb_put(o, h, 2);
    rb_u16(o, n + 5);
    rb_put(o, a, 5);
    rb_put(o, d, n);
}

static int32_t toks[64];

static void r_ping(rb *o, uint8_t ctl)
{
    Scdb__Request r = SCDB__REQUEST__INIT;
    Scdb__Ping p = SCDB__PING__INIT;
    r.body_case = SCDB__REQUEST__BODY_PING;
    r.ping = &p;
    rec(o, ctl, &r, 0, NULL, NULL);
}

static void r_lookup(rb *o, uint8_t ctl, int n)
{
    Scdb__Request r = SCDB__REQUEST__INIT;
    Scdb__LookupRequest l = SCDB__LOOKUP_REQUEST__INIT;
    l.tokens = toks;
    l.n_tokens = (size_t)n;
    r.body_case = SCDB__REQUEST__BODY_LOOKUP;
    r.lookup = &l;
    rec(o, ctl, &r, 0, NULL, NULL);
}

static void r_put(rb *o, int n_tokens, int first, int n_blocks)
{
    static uint8_t pay[8][WR_BLOCK_TOKENS * 64];
    const void *pl[8];
    size_t pll[8];
    Scdb__Request r = SCDB__REQUEST__INIT;
    Scdb__PutRequest p = SCDB__PUT_REQUEST__INIT;

    for (int i = 0; i < n_blocks; i++) {
        for (size_t k = 0; k < sizeof pay[i]; k += 2) {
            pay[i][k] = (uint8_t)(k + i);   /* small f16 values */
            pay[i][k + 1] = 0x30;
        }
        pl[i] = pay[i];
        pll[i] = sizeof pay[i];
    }
    p.tokens = toks;
    p.n_tokens = (size_t)n_tokens;
    p.first_block = (uint32_t)first;
    p.n_blocks = (uint32_t)n_blocks;
    r.body_case = SCDB__REQUEST__BODY_PUT;
    r.put = &p;
    rec(o, 0, &r, n_blocks, pl, pll);
}

static void r_arena(rb *o, uint8_t ctl, uint32_t cap, int states)
{
    Scdb__Request r = SCDB__REQUEST__INIT;
    Scdb__ArenaCreate a = SCDB__ARENA_CREATE__INIT;
    a.capacity = cap;
    a.kind = states ? SCDB__ARENA_KIND__ARENA_STATES : SCDB__ARENA_KIND__ARENA_KV;
    r.body_case = SCDB__REQUEST__BODY_ARENA_CREATE;
    r.arena_create = &a;
    rec(o, ctl, &r, 0, NULL, NULL);
}

static void r_mapped(rb *o, uint8_t ctl, uint64_t arena, int free_it)
{
    Scdb__Request r = SCDB__REQUEST__INIT;
    Scdb__ArenaMapped m = SCDB__ARENA_MAPPED__INIT;
    Scdb__ArenaFree f = SCDB__ARENA_FREE__INIT;
    m.arena = f.arena = arena;
    if (free_it) {
        r.body_case = SCDB__REQUEST__BODY_ARENA_FREE;
        r.arena_free = &f;
    } else {
        r.body_case = SCDB__REQUEST__BODY_ARENA_MAPPED;
        r.arena_mapped = &m;
    }
    rec(o, ctl, &r, 0, NULL, NULL);
}

static void r_get(rb *o, uint8_t ctl, int n, uint64_t arena, uint32_t slot0)
{
    Scdb__Request r = SCDB__REQUEST__INIT;
    Scdb__GetRequest g = SCDB__GET_REQUEST__INIT;
    g.tokens = toks;
    g.n_tokens = (size_t)n;
    g.arena = arena;
    g.slot0 = slot0;
    r.body_case = SCDB__REQUEST__BODY_GET;
    r.get = &g;
    rec(o, ctl, &r, 0, NULL, NULL);
}

static void r_put_states(rb *o, int n, uint64_t arena)
{
    Scdb__Request r = SCDB__REQUEST__INIT;
    Scdb__PutStatesRequest p = SCDB__PUT_STATES_REQUEST__INIT;
    p.tokens = toks;
    p.n_tokens = (size_t)n;
    p.arena = arena;
    r.body_case = SCDB__REQUEST__BODY_PUT_STATES;
    r.put_states = &p;
    rec(o, 2, &r, 0, NULL, NULL);
}

static void r_session(rb *o, uint64_t arena, uint32_t budget, const char *policy)
{
    Scdb__Request r = SCDB__REQUEST__INIT;
    Scdb__SessionOpen s = SCDB__SESSION_OPEN__INIT;
    s.arena = arena;
    s.budget = budget;
    s.policy = (char *)policy;
    s.cadence = 4;
    s.n_heads = 4;
    s.window = 4;
    r.body_case = SCDB__REQUEST__BODY_SESSION_OPEN;
    r.session_open = &s;
    rec(o, 1, &r, 0, NULL, NULL);
}

static void r_evict(rb *o, uint64_t session, uint32_t budget)
{
    Scdb__Request r = SCDB__REQUEST__INIT;
    Scdb__SessionEvict e = SCDB__SESSION_EVICT__INIT;
    e.session = session;
    e.budget = budget;
    r.body_case = SCDB__REQUEST__BODY_SESSION_EVICT;
    r.session_evict = &e;
    rec(o, 1, &r, 0, NULL, NULL);
}

static void r_close(rb *o, uint64_t session, uint64_t arena)
{
    Scdb__Request r = SCDB__REQUEST__INIT;
    Scdb__SessionClose c = SCDB__SESSION_CLOSE__INIT;
    c.session = session;
    c.arena = arena;
    r.body_case = SCDB__REQUEST__BODY_SESSION_CLOSE;
    r.session_close = &c;
    rec(o, 1, &r, 0, NULL, NULL);
}

static void r_simple(rb *o, uint8_t ctl, int which)
{
    Scdb__Request r = SCDB__REQUEST__INIT;
    Scdb__StatsRequest s = SCDB__STATS_REQUEST__INIT;
    Scdb__Heartbeat h = SCDB__HEARTBEAT__INIT;
    Scdb__Goodbye g = SCDB__GOODBYE__INIT;
    if (which == 0) {
        r.body_case = SCDB__REQUEST__BODY_STATS;
        r.stats = &s;
    } else if (which == 1) {
        r.body_case = SCDB__REQUEST__BODY_HEARTBEAT;
        r.heartbeat = &h;
    } else {
        r.body_case = SCDB__REQUEST__BODY_GOODBYE;
        r.goodbye = &g;
    }
    rec(o, ctl, &r, 0, NULL, NULL);
}

static void r_delete(rb *o, int n, uint32_t from)
{
    Scdb__Request r = SCDB__REQUEST__INIT;
    Scdb__DeleteRequest d = SCDB__DELETE_REQUEST__INIT;
    d.tokens = toks;
    d.n_tokens = (size_t)n;
    d.from_block = from;
    r.body_case = SCDB__REQUEST__BODY_DEL;
    r.del = &d;
    rec(o, 0, &r, 0, NULL, NULL);
}

static void r_hello(rb *o, uint8_t ctl, const char *model, const char *cb, int role)
{
    Scdb__Request r = SCDB__REQUEST__INIT;
    Scdb__Hello h = SCDB__HELLO__INIT;
    h.client_name = (char *)"seed";
    h.role = role;
    h.model = (char *)model;
    h.codebook = (char *)cb;
    r.body_case = SCDB__REQUEST__BODY_HELLO;
    r.hello = &h;
    rec(o, ctl, &r, 0, NULL, NULL);
}

static void wire_seed(const char *name, rb *o)
{
    seed("wire", name, o->buf, o->n);
    o->n = 0;
}

static void write_wire_seeds(void)
{
    static rb o;
    static float states[2 * 16 * 16];

    for (int i = 0; i < 64; i++) toks[i] = (i * 37 + 11) & 0xff;
    r_ping(&o, WR_ANON);
    r_simple(&o, 0, 0);
    r_simple(&o, 1, 1);
    r_lookup(&o, 1, 8);
    wire_seed("basic", &o);

    r_put(&o, 12, 0, 3);
    r_lookup(&o, 1, 12);
    r_arena(&o, 1, 16, 0);
    r_mapped(&o, 1, 1, 0);
    r_get(&o, 1, 12, 1, 0);
    r_mapped(&o, 1, 1, 1);
    wire_seed("put-get", &o);

    for (size_t i = 0; i < SCDB_ARRAY_LEN(states); i++) states[i] = 0.1f * sinf((float)i);
    r_arena(&o, 2, 16, 1);
    rec_write(&o, 1, SCDB_ARENA_HEADER_BYTES, states, sizeof states);
    r_put_states(&o, 8, 1);
    r_arena(&o, 3, 16, 0);
    r_get(&o, 3, 8, 2, 0);
    wire_seed("states-scd-get", &o);

    r_put(&o, 16, 0, 4);
    r_arena(&o, 1, 32, 0);
    r_get(&o, 1, 16, 1, 0);
    r_session(&o, 1, 8, "learned");
    {   /* accumulators covering the 16 slots (n; no attention yet) */
        int32_t n = 16;
        rec_write(&o, 2, 28, &n, sizeof n);
    }
    r_evict(&o, 1, 0);
    r_close(&o, 1, 0);
    wire_seed("session-learned", &o);

    r_put(&o, 16, 0, 4);
    r_arena(&o, 1, 32, 0);
    r_get(&o, 1, 16, 1, 0);
    r_session(&o, 1, 12, "h2o");
    {   /* the client scribbles over its accumulators' header */
        uint32_t junk[4] = {0x41454353u, 1, 7, 0xffffffffu};
        rec_write(&o, 2, 0, junk, sizeof junk);
    }
    r_evict(&o, 1, 6);
    r_close(&o, 0, 1);
    wire_seed("session-h2o-scribble", &o);

    r_put(&o, 12, 0, 3);
    r_delete(&o, 12, 1);
    r_lookup(&o, 1, 12);
    wire_seed("put-delete", &o);

    r_arena(&o, 1, 8, 0);
    {   /* the client claims more live slots than the arena has */
        uint32_t n = 1000;
        rec_write(&o, 1, 64, &n, sizeof n);
    }
    r_get(&o, 1, 12, 1, 4);
    wire_seed("arena-header-write", &o);

    r_hello(&o, 1, "tiny", "", SCDB__ROLE__CONSUMER);
    r_hello(&o, WR_ANON, "cons", "tiny-scd", SCDB__ROLE__CONSUMER);
    r_hello(&o, WR_ANON, "nosuch", "", SCDB__ROLE__PRODUCER);
    r_simple(&o, 0, 2);
    r_lookup(&o, 0, 4);
    wire_seed("hello-goodbye", &o);

    {
        const char junk[] = "\x08\x01\x10\x05\x52\x00 not a request";
        Scdb__Request r = SCDB__REQUEST__INIT;
        Scdb__Ping p = SCDB__PING__INIT;
        uint8_t buf[64];
        size_t n;
        rec_raw(&o, junk, sizeof junk - 1);
        r.version = 99;
        r.id = 7;
        r.body_case = SCDB__REQUEST__BODY_PING;
        r.ping = &p;
        n = scdb__request__pack(&r, buf);
        rec_raw(&o, buf, n);
        rec_raw(&o, "", 0);
        wire_seed("garbage", &o);
    }
}

int main(int argc, char **argv)
{
    char tmp[] = "/tmp/scdb-fuzz-seeds-XXXXXX";

    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_make_seeds TESTS_FUZZ_DIR\n");
        return 2;
    }
    root = argv[1];
    if (!mkdtemp(tmp)) die("mkdtemp");
    scdb_log_set_level(SCDB_LOG_ERROR);
    write_codec_seeds(tmp);
    write_gguf_seeds(tmp);
    write_policy_seeds();
    write_safetensors_seeds(tmp);
    write_block_value_seeds();
    write_config_seeds();
    write_lookup_seeds();
    write_wire_seeds();
    scdb_rm_tree(tmp);
    printf("seeds written under %s\n", root);
    return 0;
}
