/* broker_client.c — a client process for tests/test_broker.c.
 *
 *   broker_client ENDPOINT put   MODEL SEED NTOK        producer: put prefix SEED
 *   broker_client ENDPOINT check MODEL SEED NTOK [copy] consumer: lookup + get
 *                                                       (arena or copy), verify
 *   broker_client ENDPOINT hold  MODEL                  consumer: map an arena,
 *                                                       print "ready", sleep
 *   broker_client ENDPOINT loop  MODEL SEED NTOK SECS   consumer: get + verify
 *                                                       over and over
 *   broker_client ENDPOINT session MODEL                consumer: an arena with a
 *                                                       live session, "ready", sleep
 *
 * Exit 0 when everything matched, 1 on a failed call, 3 on wrong bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "broker_kv.h"
#include "scdb.h"

static scdb *h;

static int fail(const char *what, scdb_err e)
{
    fprintf(stderr, "broker_client %d: %s: %s: %s\n", (int)getpid(), what, scdb_strerror(e),
            scdb_last_error(h));
    scdb_close(&h);
    return 1;
}

static int get_and_check(uint32_t seed, const int32_t *tok, int ntok, scdb_arena *a, int copy,
                         int f16, const scdb_info *info)
{
    scdb_get_result r;
    scdb_kv_cache *c = NULL;
    int want = ntok / (int)info->block_tokens * (int)info->block_tokens;
    scdb_err e;
    long bad;

    if (copy) {
        e = scdb_kv_cache_new(info->n_layers, info->n_kv_heads, info->head_dim, ntok + 8, &c);
        if (e) return fail("cache", e);
        e = scdb_get_copy(h, tok, (size_t)ntok, c, 0, 0, &r);
    } else {
        scdb_arena_cache(a)->n = 0;
        e = scdb_get(h, tok, (size_t)ntok, a, 0, 0, &r);
        c = scdb_arena_cache(a);
    }
    if (e) return fail("get", e);
    if ((int)r.tokens_written != want || c->n != want) {
        fprintf(stderr, "broker_client: wrote %u tokens (cache n %d), expected %d\n",
                r.tokens_written, c->n, want);
        return 3;
    }
    bad = bkv_check(seed, c, 0, 0, want, 0, f16);
    if (copy) scdb_kv_cache_free(&c);
    if (bad) {
        fprintf(stderr, "broker_client: element %ld differs\n", bad - 1);
        return 3;
    }
    return 0;
}

int main(int argc, char **argv)
{
    scdb_opts o = {0};
    scdb_info info;
    const char *mode, *model;
    uint32_t seed = 0;
    int ntok = 0, rc = 0;
    int32_t *tok = NULL;
    scdb_err e;

    if (argc < 4) {
        fprintf(stderr, "usage: broker_client ENDPOINT put|check|hold|loop MODEL ...\n");
        return 2;
    }
    o.endpoint = argv[1];
    o.name = argv[2];
    mode = argv[2];
    model = argv[3];
    if (argc > 5) {
        seed = (uint32_t)strtoul(argv[4], NULL, 10);
        ntok = atoi(argv[5]);
        tok = malloc(sizeof *tok * (size_t)(ntok + 1));
        bkv_tokens(seed, tok, (size_t)ntok);
    }
    e = scdb_connect(&o, &h);
    if (e) {              /* on stdout too: the test reads what a user would see */
        printf("connect: %s: %s\n", scdb_strerror(e), scdb_connect_error());
        fflush(stdout);   /* before a sanitizer's exit, which flushes nothing */
        free(tok);
        return fail("connect", e);
    }

    if (!strcmp(mode, "put")) {
        scdb_kv_cache *c;
        scdb_put_result pr;
        e = scdb_register(h, SCDB_PRODUCER, model, NULL, &info);
        if (e) return fail("register", e);
        e = scdb_kv_cache_new(info.n_layers, info.n_kv_heads, info.head_dim, ntok, &c);
        if (e) return fail("cache", e);
        bkv_fill(seed, c, ntok);
        e = scdb_put_cache(h, tok, (size_t)ntok, c, &pr);
        scdb_kv_cache_free(&c);
        if (e) return fail("put", e);
        printf("stored %u new %u\n", pr.n_stored, pr.n_new);
    } else if (!strcmp(mode, "check") || !strcmp(mode, "loop")) {
        scdb_lookup_result lr;
        scdb_arena *a = NULL;
        int copy = argc > 6 && !strcmp(argv[6], "copy");
        double until = scdb_now() + (!strcmp(mode, "loop") && argc > 6 ? atof(argv[6]) : 0);
        long rounds = 0;

        e = scdb_register(h, SCDB_CONSUMER, model, NULL, &info);
        if (e) return fail("register", e);
        e = scdb_lookup(h, tok, (size_t)ntok, &lr);
        if (e) return fail("lookup", e);
        if (lr.matched_tokens != (uint32_t)ntok / info.block_tokens * info.block_tokens) {
            fprintf(stderr, "broker_client: lookup matched %u of %d tokens\n", lr.matched_tokens,
                    ntok);
            scdb_close(&h);
            return 3;
        }
        if (!copy) {
            e = scdb_arena_new(h, ntok, &a);
            if (e) return fail("arena", e);
        }
        do {
            rc = get_and_check(seed, tok, ntok, a, copy, info.payload_dtype == SCDB_F16, &info);
            rounds++;
        } while (rc == 0 && scdb_now() < until);
        {   /* how lookups went: the shared index, or the request path */
            scdb_stat st;
            if (scdb_stats(h, &st) == SCDB_OK)
                printf("index_error %d index_lookups %llu request_lookups %llu\n",
                       (int)st.index_error, (unsigned long long)st.index_lookups,
                       (unsigned long long)st.request_lookups);
        }
        printf("rounds %ld\n", rounds);
        scdb_arena_free(&a);
    } else if (!strcmp(mode, "hold")) {
        scdb_arena *a;
        e = scdb_register(h, SCDB_CONSUMER, model, NULL, &info);
        if (e) return fail("register", e);
        e = scdb_arena_new(h, 256, &a);
        if (e) return fail("arena", e);
        printf("ready\n");
        fflush(stdout);
        for (;;) pause();
    } else if (!strcmp(mode, "session")) {
        scdb_arena *a;
        scdb_session *s;
        scdb_session_opts so = {.budget = 32, .policy = "h2o"};   /* n_heads once registered */
        e = scdb_register(h, SCDB_CONSUMER, model, NULL, &info);
        if (e) return fail("register", e);
        so.n_heads = 2 * info.n_kv_heads;
        e = scdb_arena_new(h, 128, &a);
        if (e) return fail("arena", e);
        e = scdb_session_open(a, &so, &s);
        if (e) return fail("session", e);
        printf("ready\n");
        fflush(stdout);
        for (;;) pause();
    } else {
        fprintf(stderr, "broker_client: unknown mode %s\n", mode);
        rc = 2;
    }
    free(tok);
    scdb_close(&h);
    return rc;
}
