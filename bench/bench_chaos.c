/* bench_chaos.c — `scdb bench chaos`: kill -9 the broker at random moments
 * under load and restart it, N rounds, and check that nothing acknowledged
 * is lost and nothing wrong is ever served; kill -9 clients and check that
 * the broker reclaims what they held.
 *
 *   clients (load_client.h, verify mode): --clients processes running the
 *     mixed workload for the whole bench; puts and put_states log every
 *     acknowledged put before the next call; gets read raw KV and compare
 *     every byte with what its tokens determine; lookups must match the
 *     stored prompts whole.  They reconnect by themselves (libscdb): a call
 *     that fails because the broker is down counts as unavailable, any
 *     other failure or wrong answer as a client error.
 *   each round: load for a random 0.3-1.5 s, kill -9 the broker, restart it
 *     on the same store, then check every acknowledged put (lookups through
 *     the broker: all its blocks present) and read back the last puts and a
 *     random sample of older ones byte for byte; every --client-kill-every
 *     rounds one client is killed with kill -9 and a new one started.
 *   at the end: every acknowledged put once more (present; raw ones read
 *     back), then the client-kill phase on the last broker: baseline RSS
 *     after a warm-up, clients killed mid-run, the broker's reclaim awaited
 *     (its stats: no clients, arenas or sessions left) and its RSS compared
 *     with the baseline.
 *
 * JSON: rounds, acked_blocks, lost_acked, wrong_bytes, client_errors, and
 * what else was measured (unavailable calls, verified bytes, client kills,
 * reclaim and RSS). */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "kernels.h"
#include "load_client.h"

#define MAX_ACKED 200000
#define MAX_CLIENTS 256

typedef struct chaos {
    lw_env env;
    scdb *lookup_raw, *lookup_scd, *reader;
    scdb_arena *arena;
    int32_t (*acked)[LW_PUT_TOKENS];
    int32_t (*acked_states)[LW_PUT_TOKENS];
    uint64_t lost_acked, wrong_bytes, verified_bytes, checked_puts;
    char first_loss[200];
} chaos;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: scdb bench chaos [--rounds N] [--clients C] [--json FILE]\n"
            "  --rounds N             broker kills (default 20; the issue's goal: 100)\n"
            "  --clients C            client processes under load (default 8)\n"
            "  --client-kill-every K  kill -9 one client every K rounds (default 5; 0: never)\n"
            "  --data DIR             the family's data folder (default $SCDB_DATA, else\n"
            "                         ../share/scdb beside scdb)\n"
            "  --json FILE            {rounds, acked_blocks, lost_acked, wrong_bytes,\n"
            "                          client_errors, ...}\n");
}

static uint64_t rng = 88172645463325252ull;
static double urand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) * (1.0 / 9007199254740992.0);
}

static int open_verifiers(chaos *c)
{
    scdb_opts o = {.endpoint = c->env.endpoint, .timeout_ms = 10000, .name = "verify",
                   .no_lookup_index = 1};
    if (scdb_bench_connect(&o, 30, c->env.broker, &c->lookup_raw) ||
        scdb_register(c->lookup_raw, SCDB_CONSUMER, "base", NULL, NULL) ||
        scdb_bench_connect(&o, 30, c->env.broker, &c->lookup_scd) ||
        scdb_register(c->lookup_scd, SCDB_CONSUMER, "code", "base-scd", NULL) ||
        scdb_bench_connect(&o, 30, c->env.broker, &c->reader) ||
        scdb_register(c->reader, SCDB_CONSUMER, "base", NULL, NULL))
        return -1;
    return 0;
}

/* Read back an acknowledged raw put (its tokens) byte for byte. */
static void read_back(chaos *c, const int32_t *t)
{
    scdb_get_result r;
    scdb_kv_cache *kc;
    scdb_err e;
    int kv;
    size_t per;
    uint16_t *pay;

    if (!c->arena && scdb_arena_new(c->reader, LW_PUT_TOKENS, &c->arena)) return;
    e = scdb_get(c->reader, t, LW_PUT_TOKENS, c->arena, 0, 0, &r);
    if (e == SCDB_ECLOSED) {             /* an arena from before the restart */
        scdb_arena_free(&c->arena);
        if (scdb_arena_new(c->reader, LW_PUT_TOKENS, &c->arena)) return;
        e = scdb_get(c->reader, t, LW_PUT_TOKENS, c->arena, 0, 0, &r);
    }
    if (e || r.tokens_written != LW_PUT_TOKENS) return;   /* counted by the lookup */
    kc = scdb_arena_cache(c->arena);
    kv = kc->n_kv_heads * kc->head_dim;
    per = 2 * (size_t)kc->n_layers * 64 * (size_t)kv;
    if (!(pay = malloc(per * sizeof *pay))) return;
    for (int b = 0; b < LW_PUT_TOKENS / 64; b++) {
        lw_raw_payload(t, b, kc->n_layers, kv, 64, pay);
        for (int l = 0; l < kc->n_layers; l++)
            for (int part = 0; part < 2; part++)
                for (int i = 0; i < 64; i++) {
                    const uint16_t *src = pay + ((size_t)(part * kc->n_layers + l) * 64 + i) * kv;
                    const float *row = part ? scdb_kv_v(kc, l, b * 64 + i) : scdb_kv_k(kc, l, b * 64 + i);
                    for (int j = 0; j < kv; j++)
                        if (row[j] != scdb_f16_to_f32(src[j])) c->wrong_bytes += sizeof(float);
                }
        c->verified_bytes += 2 * (size_t)kc->n_layers * 64 * kv * sizeof(float);
    }
    free(pay);
}

/* Every acknowledged put present (both blocks); read back the last `recent`
 * raw puts and `sample` random older ones (all of them: recent < 0). */
static int verify(chaos *c, int n_clients, int recent, int sample, const char *when)
{
    int na = lw_read_acked(&c->env, n_clients, 0, c->acked, MAX_ACKED);
    int ns = lw_read_acked(&c->env, n_clients, 1, c->acked_states, MAX_ACKED);
    uint64_t lost0 = c->lost_acked;

    for (int k = 0; k < 2; k++) {
        int n = k ? ns : na;
        int32_t (*acked)[LW_PUT_TOKENS] = k ? c->acked_states : c->acked;
        scdb *h = k ? c->lookup_scd : c->lookup_raw;
        for (int i = 0; i < n; i++) {
            scdb_lookup_result r;
            scdb_err e = scdb_lookup(h, acked[i], LW_PUT_TOKENS, &r);
            if (e || r.n_matched < LW_PUT_TOKENS / 64) {
                uint32_t m = e ? 0 : r.n_matched;
                c->lost_acked += (uint64_t)(LW_PUT_TOKENS / 64 - m);
                if (!c->first_loss[0])
                    snprintf(c->first_loss, sizeof c->first_loss, "%s: %s put %d: %u of 2 blocks "
                             "(%s)", when, k ? "put_states" : "raw", i, m, e ? scdb_strerror(e) : "ok");
            }
        }
    }
    for (int p = 0; p < c->env.n_prompts; p++) {   /* the populated prompts too */
        scdb_lookup_result r;
        if (scdb_lookup(c->lookup_raw, c->env.prompts[p], LW_PROMPT_TOKENS, &r) ||
            r.n_matched != LW_PROMPT_TOKENS / 64)
            c->lost_acked += LW_PROMPT_TOKENS / 64;
    }
    if (recent < 0) {
        for (int i = 0; i < na; i++) read_back(c, c->acked[i]);
        c->checked_puts += (uint64_t)na;
    } else {
        for (int i = na - recent < 0 ? 0 : na - recent; i < na; i++) read_back(c, c->acked[i]);
        for (int i = 0; na && i < sample; i++) read_back(c, c->acked[(int)(urand() * na) % na]);
        c->checked_puts += (uint64_t)(recent + sample);
    }
    return c->lost_acked > lost0 ? -1 : 0;
}

int scdb_bench_chaos(int argc, char **argv)
{
    static const struct option lo[] = {
        {"rounds", 1, 0, 'r'}, {"clients", 1, 0, 'c'}, {"client-kill-every", 1, 0, 'k'},
        {"data", 1, 0, 'd'}, {"json", 1, 0, 'j'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    static chaos c;
    static pid_t pids[MAX_CLIENTS];
    int rounds = 20, clients = 8, kill_every = 5, opt, rc = 1, n_spawned = 0, client_kills = 0;
    const char *json = NULL, *data = scdb_data_dir();
    uint64_t client_errors = 0, unavailable = 0, acked_blocks = 0, client_wrong = 0;
    uint64_t client_verified = 0, reclaimed_clients = 0, reclaimed_arenas = 0,
             reclaimed_sessions = 0;
    uint64_t op_ok[LW_N_OPS] = {0}, op_errors[LW_N_OPS] = {0}, op_unavailable[LW_N_OPS] = {0};
    long rss_base = 0, rss_after = 0, part_base[3] = {0}, part_after[3] = {0};
    int left_arenas = -1, left_sessions = -1, left_clients = -1, never_ok = 0;
    double t0 = scdb_now(), restart_s = 0;
    char first_error[200] = "", why[200];
    scdb_err pe = SCDB_OK;

    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (opt) {
        case 'r': pe = scdb_parse_int("--rounds", optarg, 0, 1000000, &rounds, why, sizeof why); break;
        case 'c': pe = scdb_parse_int("--clients", optarg, 1, 64, &clients, why, sizeof why); break;
        case 'k': pe = scdb_parse_int("--kill-every", optarg, 0, 1000000, &kill_every, why, sizeof why); break;
        case 'd': data = optarg; break;
        case 'j': json = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
        if (pe) {
            fprintf(stderr, "bench chaos: %s\n", why);
            return 2;
        }
    }
    if (rounds < 0 || clients < 1 || clients > 64) {
        usage(stderr);
        return 2;
    }
    c.acked = malloc(sizeof *c.acked * MAX_ACKED);
    c.acked_states = malloc(sizeof *c.acked_states * MAX_ACKED);
    if (!c.acked || !c.acked_states) return 1;
    fprintf(stderr, "bench chaos: starting a broker and storing 16 prompts\n");
    c.env.seed = 7;
    /* durability, not capacity: the store never evicts (the load config's
     * 2 GiB is reached in ~100 rounds now that the puts succeed, and its
     * LRU leaves would count as lost acknowledged blocks) */
    snprintf(c.env.broker_conf, sizeof c.env.broker_conf, "disk_capacity = 0\n");
    if (lw_setup(&c.env, data, 16, 3000) || open_verifiers(&c)) goto out;
    c.env.verify = 1;
    c.env.restarts = 1;
    c.env.timeout_ms = 2000;
    c.env.seconds = 1e9;                  /* until told to stop */
    c.env.rate[LW_LOOKUP_INDEX] = 20;
    c.env.rate[LW_LOOKUP_REQUEST] = 5;
    c.env.rate[LW_GET] = 3;
    c.env.rate[LW_PUT] = 5;
    c.env.rate[LW_PUT_STATES] = 2;
    c.env.rate[LW_SESSION_EVICT] = 2;

    /* the clients, for the whole run */
    {
        int ready, go = lw_spawn(&c.env, 0, clients, pids, &ready);
        if (go < 0 || lw_wait_ready(ready, clients, 120)) goto out;
        close(go);
        close(ready);
        n_spawned = clients;
    }
    for (int r = 1; r <= rounds; r++) {
        double t;
        usleep((useconds_t)((0.3 + 1.2 * urand()) * 1e6));
        if (kill_every > 0 && r % kill_every == 0 && n_spawned < MAX_CLIENTS) {
            /* a client dies (kill -9); a new one takes its place */
            int victim = (int)(urand() * clients) % clients, ready, go;
            kill(pids[victim], SIGKILL);
            waitpid(pids[victim], NULL, 0);
            client_kills++;
            go = lw_spawn(&c.env, n_spawned, 1, &pids[victim], &ready);
            if (go >= 0) {
                lw_wait_ready(ready, 1, 60);
                close(go);
                close(ready);
            }
            /* its index moved: results are collected by index at the end */
            n_spawned++;
        }
        scdb_bench_stop_broker(c.env.broker, SIGKILL);
        t = scdb_now();
        if (lw_broker_start(&c.env)) {
            fprintf(stderr, "bench chaos: round %d: the broker did not restart\n", r);
            goto out;
        }
        restart_s += scdb_now() - t;
        if (verify(&c, n_spawned, 8, 8, "after a restart"))
            fprintf(stderr, "bench chaos: round %d: ACKNOWLEDGED BLOCKS LOST (%s)\n", r,
                    c.first_loss);
        if (r % 10 == 0 || r == rounds)
            fprintf(stderr, "bench chaos: round %d/%d: %llu blocks lost, %llu wrong bytes so far\n",
                    r, rounds, (unsigned long long)c.lost_acked,
                    (unsigned long long)c.wrong_bytes);
    }
    /* stop the clients; their results */
    for (int i = 0; i < clients; i++) kill(pids[i], SIGUSR1);
    for (int i = 0; i < clients; i++) waitpid(pids[i], NULL, 0);
    for (int i = 0; i < n_spawned; i++) {
        lw_result res;
        if (lw_collect(&c.env, i, &res, NULL, NULL, NULL)) continue;   /* a killed one */
        for (int op = 0; op < LW_N_OPS; op++) {
            client_errors += res.errors[op];      /* wrong answers included */
            unavailable += res.unavailable[op];
            op_ok[op] += res.count[op];
            op_errors[op] += res.errors[op];
            op_unavailable[op] += res.unavailable[op];
        }
        client_wrong += res.wrong_bytes;
        client_verified += res.verified_bytes;
        if (res.first_error && !first_error[0])
            snprintf(first_error, sizeof first_error, "%s", res.first_error_msg);
    }
    for (int op = 0; op < LW_N_OPS; op++)
        if (c.env.rate[op] && !op_ok[op]) {
            fprintf(stderr, "bench chaos: FAILED: %s never succeeded (%llu errors)\n",
                    lw_op_names[op], (unsigned long long)op_errors[op]);
            never_ok++;
        }
    /* every acknowledged put, once more, all read back */
    verify(&c, n_spawned, -1, 0, "at the end");
    acked_blocks = 2ull * (uint64_t)(lw_read_acked(&c.env, n_spawned, 0, c.acked, MAX_ACKED) +
                                     lw_read_acked(&c.env, n_spawned, 1, c.acked_states, MAX_ACKED)) +
                   (uint64_t)c.env.n_prompts * (LW_PROMPT_TOKENS / 64);
    c.wrong_bytes += client_wrong;

    /* client kills on the last broker: baseline after a warm-up, kill all
     * clients mid-run, await the reclaim */
    {
        int ready, go;
        scdb_stat st0, st;
        double until;
        memset(&st0, 0, sizeof st0);
        memset(&st, 0, sizeof st);
        c.env.restarts = 0;
        c.env.seconds = 5;
        go = lw_spawn(&c.env, 1000, clients, pids, &ready);
        if (go >= 0 && !lw_wait_ready(ready, clients, 120)) close(go);
        close(ready);
        for (int i = 0; i < clients; i++) waitpid(pids[i], NULL, 0);
        usleep(500000);
        rss_base = lw_rss_parts(c.env.broker, part_base);
        /* the baseline: what the bench's own handles hold now (the three
         * verifiers, each registered again only once it was used after
         * the last restart, and the reader's arena) */
        if (scdb_stats(c.lookup_raw, &st0))
            fprintf(stderr, "bench chaos: no baseline stats: %s\n", scdb_last_error(c.lookup_raw));
        c.env.seconds = 60;
        go = lw_spawn(&c.env, 2000, clients, pids, &ready);
        if (go >= 0 && !lw_wait_ready(ready, clients, 120)) close(go);
        close(ready);
        sleep(3);
        for (int i = 0; i < clients; i++) {
            kill(pids[i], SIGKILL);
            waitpid(pids[i], NULL, 0);
        }
        client_kills += clients;
        until = scdb_now() + 30;
        do {
            sleep(1);
            if (scdb_stats(c.lookup_raw, &st)) continue;
            left_clients = (int)st.clients - (int)st0.clients;
            left_arenas = (int)st.arenas - (int)st0.arenas;
            left_sessions = (int)st.sessions - (int)st0.sessions;
        } while ((left_clients > 0 || left_arenas > 0 || left_sessions > 0) && scdb_now() < until);
        reclaimed_clients = st.reclaimed_clients - st0.reclaimed_clients;
        reclaimed_arenas = st.reclaimed_arenas - st0.reclaimed_arenas;
        reclaimed_sessions = st.reclaimed_sessions - st0.reclaimed_sessions;
        usleep(500000);
        rss_after = lw_rss_parts(c.env.broker, part_after);
    }

    printf("scdb bench chaos: %d broker kills (kill -9) under load from %d client processes, "
           "%d client kills, %.0f s\n\n", rounds, clients, client_kills, scdb_now() - t0);
    printf("| rounds | acked blocks | lost acked | wrong bytes | verified bytes | client errors | "
           "unavailable calls | mean restart s |\n|---|---|---|---|---|---|---|---|\n");
    printf("| %d | %llu | %llu | %llu | %llu | %llu | %llu | %.2f |\n", rounds,
           (unsigned long long)acked_blocks, (unsigned long long)c.lost_acked,
           (unsigned long long)c.wrong_bytes, (unsigned long long)(c.verified_bytes + client_verified),
           (unsigned long long)client_errors, (unsigned long long)unavailable,
           rounds ? restart_s / rounds : 0);
    printf("\n%.1f acknowledged blocks per round (goal >= 100)\n\n| op | ok | errors | "
           "unavailable |\n|---|---|---|---|\n", rounds ? (double)acked_blocks / rounds : 0);
    for (int op = 0; op < LW_N_OPS; op++)
        printf("| %s | %llu | %llu | %llu |\n", lw_op_names[op], (unsigned long long)op_ok[op],
               (unsigned long long)op_errors[op], (unsigned long long)op_unavailable[op]);
    if (first_error[0]) printf("\nfirst client error: %s\n", first_error);
    if (c.first_loss[0]) printf("\nfirst loss: %s\n", c.first_loss);
    printf("\nclients killed with kill -9 (last phase, %d): the broker reclaimed %llu clients, "
           "%llu arenas, %llu sessions; left over: %d clients, %d arenas, %d sessions; RSS %ld kB "
           "before, %ld kB after (%+.1f%%)\n", clients, (unsigned long long)reclaimed_clients,
           (unsigned long long)reclaimed_arenas, (unsigned long long)reclaimed_sessions,
           left_clients, left_arenas, left_sessions, rss_base, rss_after,
           rss_base > 0 ? 100.0 * (double)(rss_after - rss_base) / (double)rss_base : 0);
    printf("(anonymous %ld -> %ld kB, file: LMDB's map %ld -> %ld kB, shared memory %ld -> %ld kB)\n",
           part_base[0], part_after[0], part_base[1], part_after[1], part_base[2], part_after[2]);
    printf("\ngoals: 0 acknowledged blocks lost: %s; 0 wrong bytes: %s; 0 client errors: %s; "
           ">= 100 acknowledged blocks per round: %s; every op succeeded: %s; "
           "reclaimed to nothing: %s; RSS within 5%% of the baseline: %s\n",
           c.lost_acked ? "NOT met" : "met", c.wrong_bytes ? "NOT met" : "met",
           client_errors ? "NOT met" : "met",
           rounds && acked_blocks >= 100ull * (uint64_t)rounds ? "met" : "NOT met",
           never_ok ? "NOT met" : "met",
           left_clients <= 0 && left_arenas <= 0 && left_sessions <= 0 ? "met" : "NOT met",
           rss_base > 0 && labs(rss_after - rss_base) * 20 <= rss_base ? "met" : "NOT met");
    if (json) {
        cJSON *root = cJSON_CreateObject(), *rec = cJSON_CreateObject(), *rss = cJSON_CreateObject();
        cJSON_AddNumberToObject(root, "rounds", rounds);
        cJSON_AddNumberToObject(root, "acked_blocks", (double)acked_blocks);
        cJSON_AddNumberToObject(root, "lost_acked", (double)c.lost_acked);
        cJSON_AddNumberToObject(root, "wrong_bytes", (double)c.wrong_bytes);
        cJSON_AddNumberToObject(root, "client_errors", (double)client_errors);
        cJSON_AddNumberToObject(root, "clients", clients);
        cJSON_AddNumberToObject(root, "unavailable_calls", (double)unavailable);
        cJSON_AddNumberToObject(root, "verified_bytes", (double)(c.verified_bytes + client_verified));
        cJSON_AddNumberToObject(root, "client_kills", client_kills);
        cJSON_AddNumberToObject(root, "mean_restart_s", rounds ? restart_s / rounds : 0);
        {
            cJSON *ops = cJSON_CreateArray();
            for (int op = 0; op < LW_N_OPS; op++) {
                cJSON *e = cJSON_CreateObject();
                cJSON_AddStringToObject(e, "op", lw_op_names[op]);
                cJSON_AddNumberToObject(e, "ok", (double)op_ok[op]);
                cJSON_AddNumberToObject(e, "errors", (double)op_errors[op]);
                cJSON_AddNumberToObject(e, "unavailable", (double)op_unavailable[op]);
                cJSON_AddItemToArray(ops, e);
            }
            cJSON_AddItemToObject(root, "ops", ops);
        }
        cJSON_AddNumberToObject(rec, "clients", (double)reclaimed_clients);
        cJSON_AddNumberToObject(rec, "arenas", (double)reclaimed_arenas);
        cJSON_AddNumberToObject(rec, "sessions", (double)reclaimed_sessions);
        cJSON_AddNumberToObject(rec, "left_clients", left_clients);
        cJSON_AddNumberToObject(rec, "left_arenas", left_arenas);
        cJSON_AddNumberToObject(rec, "left_sessions", left_sessions);
        cJSON_AddItemToObject(root, "reclaimed", rec);
        cJSON_AddNumberToObject(rss, "baseline", (double)rss_base);
        cJSON_AddNumberToObject(rss, "after_reclaim", (double)rss_after);
        cJSON_AddItemToObject(root, "rss_kb", rss);
        scdb_bench_write_json(json, root, "scdb bench chaos");
        cJSON_Delete(root);
    }
    if (never_ok)
        fprintf(stderr, "bench chaos: FAILED: %d op(s) of the mix never succeeded\n", never_ok);
    rc = c.lost_acked || c.wrong_bytes || never_ok ? 1 : 0;
out:
    scdb_arena_free(&c.arena);
    scdb_close(&c.lookup_raw);
    scdb_close(&c.lookup_scd);
    scdb_close(&c.reader);
    lw_teardown(&c.env, rc != 0);
    free(c.acked);
    free(c.acked_states);
    return rc;
}
