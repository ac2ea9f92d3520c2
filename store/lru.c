/* lru.c — least-recently-used order over the nodes a tier may evict.
 *
 * The store keeps one heap per tier holding only the nodes that are
 * evictable right now (on disk: stored, unpinned, no stored child; hot:
 * cached and unpinned).  A binary min-heap on (tick, id) rather than a
 * linked list because eligibility changes out of recency order: when a
 * leaf is evicted its parent may become a leaf, and it must take its place
 * by its own last use, not at the list's head.  Each node records its
 * position so removal and re-ordering are O(log n). */
#include "store_int.h"

static int older(const st_node *nodes, uint32_t a, uint32_t b)
{
    if (nodes[a].tick != nodes[b].tick) return nodes[a].tick < nodes[b].tick;
    return a < b;
}

static void set(st_lru *h, st_node *nodes, size_t i, uint32_t id)
{
    h->heap[i] = id;
    nodes[id].heap_pos[h->which] = (int32_t)i;
}

static void sift_up(st_lru *h, st_node *nodes, size_t i)
{
    uint32_t id = h->heap[i];
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!older(nodes, id, h->heap[p])) break;
        set(h, nodes, i, h->heap[p]);
        i = p;
    }
    set(h, nodes, i, id);
}

static void sift_down(st_lru *h, st_node *nodes, size_t i)
{
    uint32_t id = h->heap[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && older(nodes, h->heap[c + 1], h->heap[c])) c++;
        if (!older(nodes, h->heap[c], id)) break;
        set(h, nodes, i, h->heap[c]);
        i = c;
    }
    set(h, nodes, i, id);
}

void st_lru_push(st_lru *h, st_node *nodes, uint32_t id)
{
    h->heap[h->n] = id;
    nodes[id].heap_pos[h->which] = (int32_t)h->n;
    h->n++;
    sift_up(h, nodes, h->n - 1);
}

void st_lru_remove(st_lru *h, st_node *nodes, uint32_t id)
{
    size_t i = (size_t)nodes[id].heap_pos[h->which];
    uint32_t last = h->heap[--h->n];
    nodes[id].heap_pos[h->which] = -1;
    if (i == h->n) return;
    set(h, nodes, i, last);
    sift_up(h, nodes, i);
    sift_down(h, nodes, (size_t)nodes[last].heap_pos[h->which]);
}

void st_lru_update(st_lru *h, st_node *nodes, uint32_t id)
{
    size_t i = (size_t)nodes[id].heap_pos[h->which];
    sift_up(h, nodes, i);
    sift_down(h, nodes, (size_t)nodes[id].heap_pos[h->which]);
}

uint32_t st_lru_peek(const st_lru *h)
{
    return h->n ? h->heap[0] : SCDB_NONE;
}
