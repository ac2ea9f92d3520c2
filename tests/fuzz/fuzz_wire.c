/* fuzz_wire.c — the broker's request path: frames through the real handler
 * dispatch (bk_handle, broker/handlers.c), the jobs it queues (workers,
 * writer, store, decoders, eviction) and the replies, on a broker in this
 * process (tests/helpers/broker_inproc.h) with four registered clients and
 * the small SCD codebook, pair and policy of tests/fuzz/seeds/.  The input
 * is a sequence of requests and shared-memory writes (wire_records.h).
 *
 * Invariants (abort = a finding): every request gets exactly one reply,
 * which parses and carries the request's id (0 for bytes that are not a
 * Request); no job is left in flight after its reply; the broker still
 * answers a ping after the input; and the sanitizers see no bad access.
 * Between inputs every arena and session the input made is freed and any
 * client it registered is dropped (the store keeps what it was given). */
#include "fuzz.h"

#include <string.h>

#include "broker_inproc.h"
#include "wire_records.h"

static bi_broker *bi;
static int verbose;     /* $SCDB_FUZZ_VERBOSE: each request's reply on stderr */
static uint64_t token[4];
static const struct {
    int role;
    const char *model, *codebook;
} who[4] = {
    {SCDB__ROLE__PRODUCER, "tiny", NULL},
    {SCDB__ROLE__CONSUMER, "tiny", NULL},
    {SCDB__ROLE__PRODUCER, "tiny", "tiny-scd"},
    {SCDB__ROLE__CONSUMER, "cons", "tiny-scd"},
};

/* what this input created, by order: the numbers STAMP maps */
static uint64_t arenas[64], sessions[64];
static int n_arenas, n_sessions;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    char ini[2048], err[512];
    (void)argc;
    (void)argv;
    snprintf(ini, sizeof ini, WR_CONFIG_FMT, SCDB_FUZZ_SEEDS, SCDB_FUZZ_SEEDS, SCDB_FUZZ_SEEDS);
    if (bi_open(ini, &bi, err, sizeof err)) {
        fprintf(stderr, "fuzz_wire: cannot start the broker: %s\n", err);
        abort();
    }
    scdb_log_set_level(SCDB_LOG_OFF);
    verbose = getenv("SCDB_FUZZ_VERBOSE") != NULL;
    return 0;
}

static void ensure_clients(void)
{
    for (int i = 0; i < 4; i++)
        if (!token[i] || !bk_client_find(bi->b, token[i]))
            FUZZ_CHECK(bi_hello(bi, who[i].role, who[i].model, who[i].codebook, &token[i]) == 0);
}

static uint64_t map_id(uint64_t v, const uint64_t *ids, int n)
{
    return v >= 1 && v <= (uint64_t)n ? ids[v - 1] : v;
}

static void stamp(Scdb__Request *r, int client, int anon)
{
    r->version = SCDB_PROTO_VERSION;
    r->client = anon ? 0 : token[client];
    switch (r->body_case) {
    case SCDB__REQUEST__BODY_GET: r->get->arena = map_id(r->get->arena, arenas, n_arenas); break;
    case SCDB__REQUEST__BODY_PUT_STATES:
        r->put_states->arena = map_id(r->put_states->arena, arenas, n_arenas);
        break;
    case SCDB__REQUEST__BODY_ARENA_MAPPED:
        r->arena_mapped->arena = map_id(r->arena_mapped->arena, arenas, n_arenas);
        break;
    case SCDB__REQUEST__BODY_ARENA_FREE:
        r->arena_free->arena = map_id(r->arena_free->arena, arenas, n_arenas);
        break;
    case SCDB__REQUEST__BODY_SESSION_OPEN:
        r->session_open->arena = map_id(r->session_open->arena, arenas, n_arenas);
        break;
    case SCDB__REQUEST__BODY_SESSION_EVICT:
        r->session_evict->session = map_id(r->session_evict->session, sessions, n_sessions);
        break;
    case SCDB__REQUEST__BODY_SESSION_CLOSE:
        r->session_close->session = map_id(r->session_close->session, sessions, n_sessions);
        r->session_close->arena = map_id(r->session_close->arena, arenas, n_arenas);
        break;
    default: break;
    }
}

static void note_reply(const Scdb__Reply *r)
{
    if (r->status) return;
    if (r->body_case == SCDB__REPLY__BODY_ARENA && n_arenas < (int)SCDB_ARRAY_LEN(arenas))
        arenas[n_arenas++] = r->arena->arena;
    if (r->body_case == SCDB__REPLY__BODY_SESSION_OPEN) {
        if (n_sessions < (int)SCDB_ARRAY_LEN(sessions)) sessions[n_sessions++] = r->session_open->session;
        if (n_arenas < (int)SCDB_ARRAY_LEN(arenas)) arenas[n_arenas++] = r->session_open->stats_arena;
    }
}

/* A client writing its shared memory: bytes = arena k, offset, data. */
static void write_shared(const uint8_t *p, size_t len)
{
    uint64_t id;
    uint32_t off;
    bk_arena *a = NULL;

    if (len < 5) return;
    id = map_id(p[0], arenas, n_arenas);
    memcpy(&off, p + 1, 4);
    for (int i = 0; i < 4 && !a; i++) {
        bk_client *c = bk_client_find(bi->b, token[i]);
        if (c) a = bk_arena_find(c, id);
    }
    if (!a || !a->map || !a->size) return;
    off %= (uint32_t)a->size;
    len -= 5;
    if (len > a->size - off) len = a->size - off;
    memcpy((uint8_t *)a->map + off, p + 5, len);
}

static void one_request(uint8_t ctl, const uint8_t *bytes, size_t len, const void **frames,
                        const size_t *flen, int nf)
{
    Scdb__Request *rq = scdb__request__unpack(NULL, len, bytes);
    Scdb__Reply *rep = NULL;
    uint8_t *packed = NULL;
    uint64_t want_id = rq ? rq->id : 0;

    if ((ctl & WR_STAMP) && rq) {
        stamp(rq, ctl & WR_CLIENT_MASK, (ctl & WR_ANON) != 0);
        len = scdb__request__get_packed_size(rq);
        packed = malloc(len ? len : 1);
        FUZZ_CHECK(packed);
        scdb__request__pack(rq, packed);
        bytes = packed;
        /* the id the broker will see: what the packed bytes parse to
         * (libprotobuf-c keeps a field 0 read from a non-minimal tag as
         * an unknown field and packs it as a tag it then refuses, so a
         * repacked request need not parse: then the reply's id is 0) */
        {
            Scdb__Request *again = scdb__request__unpack(NULL, len, bytes);
            want_id = again ? again->id : 0;
            if (again) scdb__request__free_unpacked(again, NULL);
        }
    }
    FUZZ_CHECK(bi_call(bi, bytes, len, frames, flen, nf, 20000, &rep) == 0);
    FUZZ_CHECK(rep != NULL);
    if (verbose && rep->id != want_id)
        fprintf(stderr, "  reply id %llu, expected %llu: %s %s\n", (unsigned long long)rep->id,
                (unsigned long long)want_id, scdb_strerror((scdb_err)rep->status), rep->message);
    FUZZ_CHECK(rep->id == want_id);
    FUZZ_CHECK(bi->b->inflight == 0);
    if (verbose)
        fprintf(stderr, "  request body %d (client %d%s): %s %s\n", rq ? (int)rq->body_case : -1,
                ctl & WR_CLIENT_MASK, (ctl & WR_STAMP) ? ", stamped" : "",
                scdb_strerror((scdb_err)rep->status), rep->message);
    note_reply(rep);
    scdb__reply__free_unpacked(rep, NULL);
    if (rq) scdb__request__free_unpacked(rq, NULL);
    free(packed);
}

/* Free what the input made; drop the clients it registered. */
static void reset(void)
{
    scdb_broker *b = bi->b;
    bk_client *extra[256];
    int n_extra = 0;

    for (int i = 0; i < 4; i++) {
        bk_client *c = bk_client_find(b, token[i]);
        if (!c) continue;
        while (c->sessions) bk_session_close(b, c, c->sessions);
        while (c->arenas) bk_client_free_arena(b, c, c->arenas);
    }
    for (size_t i = 0; i < BK_BUCKETS; i++)
        for (bk_client *c = b->buckets[i]; c && n_extra < 256; c = c->next)
            if (c->token != token[0] && c->token != token[1] && c->token != token[2] &&
                c->token != token[3])
                extra[n_extra++] = c;
    for (int i = 0; i < n_extra; i++) bk_client_drop(b, extra[i], NULL);
    n_arenas = n_sessions = 0;
}

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t o = 0;
    int records = 0;

    if (!bi) LLVMFuzzerInitialize(NULL, NULL);
    ensure_clients();
    while (o + 4 <= size && records++ < WR_MAX_RECORDS) {
        uint8_t ctl = data[o], np = data[o + 1];
        size_t len = rd16(data + o + 2);
        const uint8_t *bytes;
        const void *frames[WR_MAX_PAYLOAD];
        size_t flen[WR_MAX_PAYLOAD];
        int nf = 0;

        o += 4;
        if (len > size - o) len = size - o;
        bytes = data + o;
        o += len;
        for (int i = 0; i < np && o + 2 <= size; i++) {
            size_t pl = rd16(data + o);
            o += 2;
            if (pl > size - o) pl = size - o;
            if (nf < WR_MAX_PAYLOAD) {
                frames[nf] = data + o;
                flen[nf++] = pl;
            }
            o += pl;
        }
        if (ctl & WR_WRITE)
            write_shared(bytes, len);
        else
            one_request(ctl, bytes, len, frames, flen, nf);
    }
    {   /* still serving */
        Scdb__Request rq = SCDB__REQUEST__INIT;
        Scdb__Ping p = SCDB__PING__INIT;
        rq.body_case = SCDB__REQUEST__BODY_PING;
        rq.ping = &p;
        FUZZ_CHECK(bi_request(bi, &rq, NULL, NULL, 0, NULL) == 0);
    }
    reset();
    return 0;
}
