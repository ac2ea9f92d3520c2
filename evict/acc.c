/* acc.c — the flat per-slot feature accumulators (layout in evict.h and
 * schema/FORMATS.md): init over caller memory, attach, copy, and the update
 * from one forward's attention probabilities.  The part of evict/ that
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

size_t scdb_evict_acc_bytes(const scdb_evict_acc_shape *s)
{
    int w = shape_window(s);
    if (bad_shape(s, w)) return 0;
    return bytes_for(s->n_kv_heads, s->capacity, w);
}

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
    if (!mem || ((uintptr_t)mem & 63) || bad_shape(s, w)) return SCDB_EINVAL;
    need = bytes_for(s->n_kv_heads, s->capacity, w);
    if (len < need) return SCDB_EINVAL;
    memset(a, 0, HDR_BYTES);
    a->magic = SCDB_EVICT_ACC_MAGIC;
    a->version = SCDB_EVICT_ACC_VERSION;
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
    if (a->version != SCDB_EVICT_ACC_VERSION) return SCDB_EUNSUPPORTED;
    s = (scdb_evict_acc_shape){a->n_layers, a->n_heads, a->n_kv_heads, a->capacity, a->window};
    if (bad_shape(&s, a->window) || a->bytes != bytes_for(a->n_kv_heads, a->capacity, a->window))
        return SCDB_ERANGE;
    if (len < a->bytes) return SCDB_ETRUNC;
    if (a->n < 0 || a->n > a->capacity || a->ring_next < 0 || a->ring_next >= a->window ||
        a->ring_fill < 0 || a->ring_fill > a->window || !(a->decay >= 0.0f && a->decay <= 1.0f))
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
    if (dst->bytes != src->bytes || dst->n_layers != src->n_layers ||
        dst->n_heads != src->n_heads || dst->n_kv_heads != src->n_kv_heads ||
        dst->capacity != src->capacity || dst->window != src->window)
        return SCDB_ESHAPE;
    memcpy(dst, src, (size_t)src->bytes);
    return SCDB_OK;
}

/* ------------------------------------------------------------ update */

/* Zero every per-slot value of slot j (all arrays, every ring row). */
static void clear_slot(scdb_evict_acc *a, int j)
{
    for (int k = 1; k < N_SLOT_ARRAYS; k++) ((float *)arr(a, k))[j] = 0.0f;
    float *win = scdb_evict_acc_win(a);
    for (int r = 0; r < a->window * a->n_kv_heads; r++) win[(size_t)r * a->capacity + j] = 0.0f;
}

scdb_err scdb_evict_acc_update(scdb_evict_acc *a, const scdb_kv_cache *c,
                               const float *probs, int probs_slots, int n_new)
{
    const int L = a ? a->n_layers : 0, H = a ? a->n_heads : 0, G = a ? a->n_kv_heads : 0;
    int n, n_old, hd, lh_count;
    float *ent = NULL, *sum = NULL, *sq = NULL, *grp = NULL;
    scdb_err rc = SCDB_ENOMEM;

    if (!a || !c || n_new <= 0) return SCDB_EINVAL;
    if (c->n_layers != L || c->n_kv_heads != G || c->capacity > a->capacity) return SCDB_ESHAPE;
    n = c->n;
    n_old = a->n;
    if (n_old + n_new != n || (probs && probs_slots < n)) return SCDB_EINVAL;
    hd = c->head_dim;
    lh_count = L * H;

    int32_t *pos = scdb_evict_acc_pos(a);
    float *n_obs = scdb_evict_acc_n_obs(a), *mass = scdb_evict_acc_mass(a),
          *rel = scdb_evict_acc_rel(a), *var = scdb_evict_acc_var(a),
          *enum_ = scdb_evict_acc_ent_num(a), *eden = scdb_evict_acc_ent_den(a),
          *vnorm = scdb_evict_acc_vnorm(a), *last = scdb_evict_acc_last(a),
          *win = scdb_evict_acc_win(a);

    ent = malloc((size_t)lh_count * sizeof *ent);
    sum = malloc((size_t)n * sizeof *sum);
    sq = malloc((size_t)n * sizeof *sq);
    grp = malloc((size_t)G * n * sizeof *grp);
    if (!ent || !sum || !sq || !grp) goto done;

    /* new slots: position and mean V norm over layers and KV heads */
    for (int j = n_old; j < n; j++) {
        double s = 0.0;
        clear_slot(a, j);
        pos[j] = c->pos[j];
        for (int l = 0; l < L; l++) {
            const float *v = scdb_kv_v(c, l, j);
            for (int g = 0; g < G; g++) {
                double ss = 0.0;
                for (int d = 0; d < hd; d++) ss += (double)v[g * hd + d] * v[g * hd + d];
                s += sqrt(ss);
            }
        }
        vnorm[j] = (float)(s / (L * G));
    }

    for (int q = 0; probs && q < n_new; q++) {
        int32_t qp = c->pos[n_old + q];
        int nvis = 0;
        for (int j = 0; j < n; j++) nvis += c->pos[j] <= qp;
        float lognv = nvis > 1 ? logf((float)nvis) : 1.0f;
        int hpg = H / G;

        /* per-row normalised entropy (a decode step's query sees every
         * slot: no position test in that loop, which then vectorises) */
        for (int lh = 0; lh < lh_count; lh++) {
            const float *row = probs + ((size_t)lh * n_new + q) * (size_t)probs_slots;
            float e = 0.0f;
            if (nvis == n) {
                /* the p log p terms first (a map, which vectorises), then
                 * their sum in order */
                for (int j = 0; j < n; j++)   /* scdb_evict_log(0) is finite: 0 adds 0 */
                    sq[j] = row[j] * scdb_evict_log(row[j]);
                for (int j = 0; j < n; j++) e -= sq[j];
            } else
                for (int j = 0; j < n; j++)
                    if (row[j] > 1e-30f && c->pos[j] <= qp) e -= row[j] * scdb_evict_log(row[j]);
            ent[lh] = nvis > 1 ? e / lognv : 0.0f;
        }
        memset(sum, 0, (size_t)n * sizeof *sum);
        memset(sq, 0, (size_t)n * sizeof *sq);
        memset(grp, 0, (size_t)G * n * sizeof *grp);
        for (int j = 0; j < n; j++) {
            n_obs[j] *= a->decay;
            rel[j] *= a->decay;
            var[j] *= a->decay;
            enum_[j] *= a->decay;
            eden[j] *= a->decay;
        }
        for (int l = 0; l < L; l++)
            for (int h = 0; h < H; h++) {
                int lh = l * H + h;
                const float *row = probs + ((size_t)lh * n_new + q) * (size_t)probs_slots;
                float *gr = grp + (size_t)(h / hpg) * n;
                const float el = ent[lh];
                if (nvis == n)
                    for (int j = 0; j < n; j++) {
                        float p = row[j];
                        sum[j] += p;
                        sq[j] += p * p;
                        enum_[j] += p * el;
                        eden[j] += p;
                        gr[j] += p;
                    }
                else
                for (int j = 0; j < n; j++) {
                    float p = c->pos[j] <= qp ? row[j] : 0.0f;
                    sum[j] += p;
                    sq[j] += p * p;
                    enum_[j] += p * ent[lh];
                    eden[j] += p;
                    gr[j] += p;
                }
            }
        float *wrow = win + (size_t)a->ring_next * G * a->capacity;
        for (int g = 0; g < G; g++) {
            float *dst = wrow + (size_t)g * a->capacity;
            const float *src = grp + (size_t)g * n;
            for (int j = 0; j < n; j++) dst[j] = src[j] / (float)(L * hpg);
            memset(dst + n, 0, (size_t)(a->capacity - n) * sizeof *dst);
        }
        a->ring_next = (a->ring_next + 1) % a->window;
        if (a->ring_fill < a->window) a->ring_fill++;

        for (int j = 0; j < n; j++) {
            if (c->pos[j] > qp) { last[j] = 0.0f; continue; }
            float m = sum[j] / (float)lh_count;                  /* mean a */
            float mr = m * (float)nvis;                          /* mean a * nvis */
            float v = sq[j] / (float)lh_count * (float)nvis * (float)nvis - mr * mr;
            n_obs[j] += 1.0f;
            mass[j] += m;
            rel[j] += mr;
            var[j] += v > 0.0f ? v : 0.0f;
            last[j] = m;
        }
        a->last_pos = qp;
        a->n_queries++;
    }
    a->n = n;
    rc = SCDB_OK;
done:
    free(ent);
    free(sum);
    free(sq);
    free(grp);
    return rc;
}

size_t scdb_evict_acc_offset(const scdb_evict_acc *a, int k)
{
    return HDR_BYTES + (size_t)k * slot_array_bytes(a->capacity);
}
