/* acc.c — the flat per-slot feature accumulators (layout in evict.h and
 * schema/FORMATS.md): init over caller memory, attach, copy, and the update
 * from one forward's attention probabilities (the kernels' CPU twin over
 * this buffer: kernels/cpu/acc_ops.c).  The part of evict/ that
 * libscdb compiles in (clients fold their statistics themselves);
 * compaction and the features, which only the broker and the benches run,
 * are in policy.c on the kernels' eviction twins. */
#include "evict_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define HDR_BYTES 64
#define N_SLOT_ARRAYS SCDB_EVICT_ACC_SLOT_ARRAYS

_Static_assert(sizeof(scdb_evict_acc) == HDR_BYTES, "accumulator header is 64 bytes");

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

static size_t slot_array_bytes(int capacity) { return align64((size_t)capacity * 4); }

static int bad_shape(const scdb_evict_acc_shape *s, int window)
{
    return !s || s->n_layers <= 0 || s->n_heads <= 0 || s->n_kv_heads <= 0 ||
           s->capacity <= 0 || window <= 0 || s->n_layers > 4096 || s->n_heads > 4096 ||
           s->n_kv_heads > s->n_heads || s->n_heads % s->n_kv_heads != 0 ||
           s->capacity > (1 << 24) || window > 4096;
}

static int shape_window(const scdb_evict_acc_shape *s)
{
    return s && s->window > 0 ? s->window : (s && s->window == 0 ? SCDB_EVICT_DEFAULT_WINDOW : -1);
}

static size_t bytes_for(int n_kv_heads, int capacity, int window)
{
    return HDR_BYTES + N_SLOT_ARRAYS * slot_array_bytes(capacity) +
           align64((size_t)window * n_kv_heads * capacity * 4);
}

/* The per-head layout (version 2): version 1's buffer (header, slot
 * arrays, ring; valid while every set keeps the same slots), then a
 * 64-byte block whose first word is the mode, then pos, mass, last
 * [K][capacity] and the ring [window][K][capacity], K = n_layers *
 * n_kv_heads keep sets. */
static size_t head_array_bytes(int n_sets, int capacity)
{
    return align64((size_t)n_sets * capacity * 4);
}

static size_t bytes_for_heads(int n_layers, int n_kv_heads, int capacity, int window)
{
    int k = n_layers * n_kv_heads;
    return bytes_for(n_kv_heads, capacity, window) + HDR_BYTES +
           SCDB_EVICT_ACC_HEAD_ARRAYS * head_array_bytes(k, capacity) +
           align64((size_t)window * k * capacity * 4);
}

static size_t shape_bytes(const scdb_evict_acc_shape *s, int w)
{
    return s->per_head ? bytes_for_heads(s->n_layers, s->n_kv_heads, s->capacity, w)
                       : bytes_for(s->n_kv_heads, s->capacity, w);
}

size_t scdb_evict_acc_bytes(const scdb_evict_acc_shape *s)
{
    int w = shape_window(s);
    if (bad_shape(s, w) || (s->per_head != 0 && s->per_head != 1) ||
        (s->per_head && (size_t)s->n_layers * s->n_kv_heads > SCDB_EVICT_MAX_SETS))
        return 0;
    return shape_bytes(s, w);
}

int scdb_evict_acc_per_head(const scdb_evict_acc *a)
{
    return a && a->version == SCDB_EVICT_ACC_VERSION_HEADS;
}

int scdb_evict_acc_n_sets(const scdb_evict_acc *a)
{
    return scdb_evict_acc_per_head(a) ? a->n_layers * a->n_kv_heads : 1;
}

static void *harr(const scdb_evict_acc *a, int k)
{
    return (char *)a + bytes_for(a->n_kv_heads, a->capacity, a->window) + HDR_BYTES +
           (size_t)k * head_array_bytes(a->n_layers * a->n_kv_heads, a->capacity);
}

static uint32_t *mode_word(const scdb_evict_acc *a)
{
    return (uint32_t *)((char *)a + bytes_for(a->n_kv_heads, a->capacity, a->window));
}

int scdb_evict_acc_mode(const scdb_evict_acc *a)
{
    if (!scdb_evict_acc_per_head(a)) return SCDB_EVICT_MODE_SHARED;
    uint32_t m = *mode_word(a);
    return m <= SCDB_EVICT_MODE_SPLIT ? (int)m : -1;
}

void scdb_evict_acc_set_mode(scdb_evict_acc *a, int mode)
{
    if (scdb_evict_acc_per_head(a)) *mode_word(a) = (uint32_t)mode;
}

int32_t *scdb_evict_acc_head_pos(const scdb_evict_acc *a) { return harr(a, 0); }
float *scdb_evict_acc_head_mass(const scdb_evict_acc *a) { return harr(a, 1); }
float *scdb_evict_acc_head_last(const scdb_evict_acc *a) { return harr(a, 2); }
float *scdb_evict_acc_head_win(const scdb_evict_acc *a) { return harr(a, 3); }

/* array k (0 = pos ... 8 = last, 9 = win) */
static void *arr(const scdb_evict_acc *a, int k)
{
    return (char *)a + HDR_BYTES + (size_t)k * slot_array_bytes(a->capacity);
}

int32_t *scdb_evict_acc_pos(const scdb_evict_acc *a) { return arr(a, 0); }
float *scdb_evict_acc_n_obs(const scdb_evict_acc *a) { return arr(a, 1); }
float *scdb_evict_acc_mass(const scdb_evict_acc *a) { return arr(a, 2); }
float *scdb_evict_acc_rel(const scdb_evict_acc *a) { return arr(a, 3); }
float *scdb_evict_acc_var(const scdb_evict_acc *a) { return arr(a, 4); }
float *scdb_evict_acc_ent_num(const scdb_evict_acc *a) { return arr(a, 5); }
float *scdb_evict_acc_ent_den(const scdb_evict_acc *a) { return arr(a, 6); }
float *scdb_evict_acc_vnorm(const scdb_evict_acc *a) { return arr(a, 7); }
float *scdb_evict_acc_last(const scdb_evict_acc *a) { return arr(a, 8); }
float *scdb_evict_acc_win(const scdb_evict_acc *a) { return arr(a, 9); }

void scdb_evict_acc_reset(scdb_evict_acc *a)
{
    if (!a) return;
    a->n = 0;
    a->ring_next = 0;
    a->ring_fill = 0;
    a->last_pos = -1;
    a->n_queries = 0;
    memset((char *)a + HDR_BYTES, 0, (size_t)a->bytes - HDR_BYTES);
}

scdb_err scdb_evict_acc_init(void *mem, size_t len, const scdb_evict_acc_shape *s,
                             scdb_evict_acc **out)
{
    int w = shape_window(s);
    size_t need;
    scdb_evict_acc *a = mem;

    if (!out) return SCDB_EINVAL;
    *out = NULL;
    if (!mem || ((uintptr_t)mem & 63) || !(need = scdb_evict_acc_bytes(s))) return SCDB_EINVAL;
    if (len < need) return SCDB_EINVAL;
    memset(a, 0, HDR_BYTES);
    a->magic = SCDB_EVICT_ACC_MAGIC;
    a->version = s->per_head ? SCDB_EVICT_ACC_VERSION_HEADS : SCDB_EVICT_ACC_VERSION;
    a->n_layers = s->n_layers;
    a->n_heads = s->n_heads;
    a->n_kv_heads = s->n_kv_heads;
    a->capacity = s->capacity;
    a->window = w;
    a->decay = SCDB_EVICT_DECAY;
    a->bytes = need;
    scdb_evict_acc_reset(a);
    *out = a;
    return SCDB_OK;
}

scdb_err scdb_evict_acc_attach(void *mem, size_t len, scdb_evict_acc **out)
{
    scdb_evict_acc *a = mem;
    scdb_evict_acc_shape s;

    if (!out) return SCDB_EINVAL;
    *out = NULL;
    if (!mem || ((uintptr_t)mem & 63)) return SCDB_EINVAL;
    if (len < HDR_BYTES) return SCDB_ETRUNC;
    if (a->magic != SCDB_EVICT_ACC_MAGIC) return SCDB_EFORMAT;
    if (a->version != SCDB_EVICT_ACC_VERSION && a->version != SCDB_EVICT_ACC_VERSION_HEADS)
        return SCDB_EUNSUPPORTED;
    s = (scdb_evict_acc_shape){a->n_layers, a->n_heads, a->n_kv_heads, a->capacity, a->window,
                               a->version == SCDB_EVICT_ACC_VERSION_HEADS};
    if (bad_shape(&s, a->window) || scdb_evict_acc_bytes(&s) != a->bytes) return SCDB_ERANGE;
    if (len < a->bytes) return SCDB_ETRUNC;
    if (a->n < 0 || a->n > a->capacity || a->ring_next < 0 || a->ring_next >= a->window ||
        a->ring_fill < 0 || a->ring_fill > a->window || !(a->decay >= 0.0f && a->decay <= 1.0f) ||
        scdb_evict_acc_mode(a) < 0)
        return SCDB_ERANGE;
    *out = a;
    return SCDB_OK;
}

scdb_err scdb_evict_acc_new(const scdb_evict_acc_shape *s, scdb_evict_acc **out)
{
    size_t n = scdb_evict_acc_bytes(s);
    void *mem = NULL;
    scdb_err rc;

    if (!out) return SCDB_EINVAL;
    *out = NULL;
    if (n == 0) return SCDB_EINVAL;
    if (posix_memalign(&mem, 64, n) != 0) return SCDB_ENOMEM;
    if ((rc = scdb_evict_acc_init(mem, n, s, out))) free(mem);
    return rc;
}

void scdb_evict_acc_free(scdb_evict_acc **a)
{
    if (!a || !*a) return;
    free(*a);
    *a = NULL;
}

scdb_err scdb_evict_acc_copy(scdb_evict_acc *dst, const scdb_evict_acc *src)
{
    if (!dst || !src) return SCDB_EINVAL;
    if (dst->bytes != src->bytes || dst->version != src->version || dst->n_layers != src->n_layers ||
        dst->n_heads != src->n_heads || dst->n_kv_heads != src->n_kv_heads ||
        dst->capacity != src->capacity || dst->window != src->window)
        return SCDB_ESHAPE;
    memcpy(dst, src, (size_t)src->bytes);
    return SCDB_OK;
}

/* ------------------------------------------------------------ update */

/* The per-head layout's fold (host memory only: no device twin).  Query by
 * query: each keep set k = (layer l, KV group g) gets a = the mean over
 * g's query heads of that query's attention on its slots, added to mass,
 * stored as last and as the ring's row; the new slots' positions go to
 * every set.  Visibility is by the cache's positions, as the model's
 * attention masked it (after per-head compaction cache->pos holds, per
 * slot, the newest of the sets' positions there: every kept slot is older
 * than every new one, so the mask is the same). */
static scdb_err acc_update_heads(scdb_evict_acc *a, const scdb_kv_cache *c, const float *probs,
                                 int probs_slots, int n_new)
{
    const int L = a->n_layers, H = a->n_heads, G = a->n_kv_heads, K = L * G;
    const int cap = a->capacity, hpg = H / G;
    int n, n_old = a->n;

    if (c->n_layers != L || c->n_kv_heads != G || c->capacity > cap) return SCDB_ESHAPE;
    n = c->n;
    if (n_old + n_new != n || (probs && probs_slots < n)) return SCDB_EINVAL;
    /* while the sets keep the same slots, version 1's statistics too (the
     * network's inputs); that fold advances the header, so the sets' fold
     * below starts from the ring row it had */
    const int mode = scdb_evict_acc_mode(a);
    int ring_start = a->ring_next >= 0 && a->ring_next < a->window ? a->ring_next : 0;
    if (mode != SCDB_EVICT_MODE_SPLIT) {
        scdb_k_acc_buf b;
        scdb_err rc;
        scdb_evict_acc_buf(a, a, &b);
        if ((rc = scdb_k_acc_update_cpu(&b, n_old, c, probs, probs_slots, n_new, NULL, NULL)))
            return rc;
    }
    int32_t *pos = scdb_evict_acc_head_pos(a);
    float *mass = scdb_evict_acc_head_mass(a), *last = scdb_evict_acc_head_last(a);
    float *win = scdb_evict_acc_head_win(a);
    for (int k = 0; k < K; k++)
        for (int j = n_old; j < n; j++) {
            pos[(size_t)k * cap + j] = c->pos[j];
            mass[(size_t)k * cap + j] = 0.0f;
            last[(size_t)k * cap + j] = 0.0f;
            for (int r = 0; r < a->window; r++) win[((size_t)r * K + k) * cap + j] = 0.0f;
        }
    const float inv = 1.0f / (float)hpg;
    for (int q = 0; probs && q < n_new; q++) {
        int32_t qp = c->pos[n_old + q];
        int ring = (ring_start + q) % a->window;
        int nvis = 0;
        for (int j = 0; j < n; j++) nvis += c->pos[j] <= qp;
        for (int l = 0; l < L; l++)
            for (int g = 0; g < G; g++) {
                const size_t k = (size_t)l * G + g;
                float *ms = mass + k * cap, *ls = last + k * cap;
                float *wr = win + ((size_t)ring * K + k) * cap;
                const float *row0 =
                    probs + (((size_t)l * H + (size_t)g * hpg) * n_new + q) * (size_t)probs_slots;
                /* the group's mean, summed in head order */
                for (int j = 0; j < n; j++) wr[j] = row0[j];
                for (int h = 1; h < hpg; h++) {
                    const float *row = row0 + (size_t)h * n_new * probs_slots;
                    for (int j = 0; j < n; j++) wr[j] += row[j];
                }
                /* (the ring beyond n is never read: a slot appended later
                 * starts with its rows zeroed) */
                if (nvis == n)
                    for (int j = 0; j < n; j++) {
                        float v = wr[j] * inv;
                        wr[j] = v;
                        ms[j] += v;
                        ls[j] = v;
                    }
                else
                    for (int j = 0; j < n; j++) {
                        float v = c->pos[j] <= qp ? wr[j] * inv : 0.0f;
                        wr[j] = v;
                        ms[j] += v;
                        ls[j] = v;
                    }
            }
        if (mode == SCDB_EVICT_MODE_SPLIT) {
            a->ring_next = (ring + 1) % a->window;
            if (a->ring_fill < a->window) a->ring_fill++;
            a->last_pos = qp;
            a->n_queries++;
        }
    }
    a->n = n;
    return SCDB_OK;
}

scdb_err scdb_evict_acc_update(scdb_evict_acc *a, const scdb_kv_cache *c,
                               const float *probs, int probs_slots, int n_new)
{
    /* the CPU twin over this buffer (kernels/cpu/acc_ops.c): one fold, the
     * same for a host session and a device one on the CPU table */
    scdb_k_acc_buf b;
    if (!a || !c || n_new <= 0) return SCDB_EINVAL;
    if (scdb_evict_acc_per_head(a)) return acc_update_heads(a, c, probs, probs_slots, n_new);
    scdb_evict_acc_buf(a, a, &b);
    return scdb_k_acc_update_cpu(&b, a->n, c, probs, probs_slots, n_new, NULL, NULL);
}

size_t scdb_evict_acc_offset(const scdb_evict_acc *a, int k)
{
    return HDR_BYTES + (size_t)k * slot_array_bytes(a->capacity);
}
