/* block_index.c — the in-memory key -> node table: open addressing, linear
 * probing, backward-shift deletion (no tombstones), load factor <= 1/2.
 * Keys are XXH3 outputs, so their first 8 bytes are already a good hash. */
#include "store_int.h"

#include <stdlib.h>
#include <string.h>

static size_t slot_of(const scdb_key *k, size_t cap)
{
    uint64_t h;
    memcpy(&h, k->b + 8, 8);
    return (size_t)(h & (cap - 1));
}

scdb_err st_index_init(st_index *ix, size_t expect)
{
    size_t cap = 64;
    while (cap < 2 * expect) cap *= 2;
    ix->slots = calloc(cap, sizeof *ix->slots);
    if (!ix->slots) return SCDB_ENOMEM;
    ix->cap = cap;
    ix->n = 0;
    return SCDB_OK;
}

void st_index_free(st_index *ix)
{
    free(ix->slots);
    memset(ix, 0, sizeof *ix);
}

uint32_t st_index_find(const st_index *ix, const st_node *nodes,
                         const scdb_key *key)
{
    size_t mask = ix->cap - 1;
    for (size_t i = slot_of(key, ix->cap);; i = (i + 1) & mask) {
        uint32_t v = ix->slots[i];
        if (!v) return SCDB_NONE;
        if (!memcmp(nodes[v - 1].key.b, key->b, 16)) return v - 1;
    }
}

static void place(uint32_t *slots, size_t cap, const st_node *nodes, uint32_t id)
{
    size_t mask = cap - 1, i = slot_of(&nodes[id].key, cap);
    while (slots[i]) i = (i + 1) & mask;
    slots[i] = id + 1;
}

scdb_err st_index_insert(st_index *ix, const st_node *nodes, uint32_t id)
{
    if (2 * (ix->n + 1) > ix->cap) {
        size_t cap = ix->cap * 2;
        uint32_t *s = calloc(cap, sizeof *s);
        if (!s) return SCDB_ENOMEM;
        for (size_t i = 0; i < ix->cap; i++)
            if (ix->slots[i]) place(s, cap, nodes, ix->slots[i] - 1);
        free(ix->slots);
        ix->slots = s;
        ix->cap = cap;
    }
    place(ix->slots, ix->cap, nodes, id);
    ix->n++;
    return SCDB_OK;
}

void st_index_remove(st_index *ix, const st_node *nodes, uint32_t id)
{
    size_t mask = ix->cap - 1, i = slot_of(&nodes[id].key, ix->cap);
    while (ix->slots[i] != id + 1) i = (i + 1) & mask;
    /* Backward shift: pull later entries of the run into the hole when
     * their home slot is not inside (hole, j]. */
    for (size_t j = (i + 1) & mask; ix->slots[j]; j = (j + 1) & mask) {
        size_t home = slot_of(&nodes[ix->slots[j] - 1].key, ix->cap);
        if (((j - home) & mask) >= ((j - i) & mask)) {
            ix->slots[i] = ix->slots[j];
            i = j;
        }
    }
    ix->slots[i] = 0;
    ix->n--;
}
