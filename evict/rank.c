/* rank.c — orders of slots by a score (highest first, ties: the newer slot
 * first, the order scdb_evict_select keeps by): what the rank inputs
 * (inputs.c) and the trainer's Gumbel draws (episode.c) sort with.  No
 * dependency inside the module. */
#include "evict_internal.h"

#include <stdlib.h>
#include <string.h>

/* Merge sort of indices by score, highest first (ties: the higher index
 * first): a stable total order, no global state, so it is thread-safe. */
static int before(const float *s, int i, int j)
{
    return s[i] > s[j] || (s[i] == s[j] && i > j);
}

static void msort(const float *s, int *v, int *tmp, int n)
{
    if (n < 2) return;
    int h = n / 2, i = 0, j = h, k = 0;
    msort(s, v, tmp, h);
    msort(s, v + h, tmp, n - h);
    while (i < h && j < n) tmp[k++] = before(s, v[j], v[i]) ? v[j++] : v[i++];
    while (i < h) tmp[k++] = v[i++];
    while (j < n) tmp[k++] = v[j++];
    memcpy(v, tmp, (size_t)n * sizeof *v);
}

scdb_err scdb_evict_rank(const float *scores, int *idx, int n)
{
    int *tmp = malloc((size_t)(n > 0 ? n : 1) * sizeof *tmp);
    if (!tmp) return SCDB_ENOMEM;
    msort(scores, idx, tmp, n);
    free(tmp);
    return SCDB_OK;
}
