/* broker.c — broker setup (registry, data dir, store, lookup index, sockets,
 * threads), the main event loop, the SIGTERM drain, and teardown. */
#include "broker_int.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define DONE_ENDPOINT "inproc://scdb-done"
#define MAX_BATCH 64         /* messages per socket per loop turn */

/* ------------------------------------------------------------- helpers */

static scdb_err check_config(const scdb_broker_config *c, char *errbuf, size_t errlen)
{
    scdb_err e = bk_check_endpoints(c, errbuf, errlen);

    if (e) return e;
    if (c->workers < 1) {
        snprintf(errbuf, errlen, "workers must be at least 1");
        return SCDB_EINVAL;
    }
    if (c->heartbeat_timeout_ms <= c->heartbeat_ms) {
        snprintf(errbuf, errlen, "heartbeat_timeout_ms (%d) must exceed heartbeat_ms (%d)",
                 c->heartbeat_timeout_ms, c->heartbeat_ms);
        return SCDB_EINVAL;
    }
    if (c->max_request_bytes < 1024) {
        snprintf(errbuf, errlen, "max_request_bytes must be at least 1024");
        return SCDB_EINVAL;
    }
    if (!c->data_dir[0]) {
        snprintf(errbuf, errlen, "data_dir is empty");
        return SCDB_EINVAL;
    }
    return SCDB_OK;
}

static scdb_err lock_data_dir(scdb_broker *b, char *errbuf, size_t errlen)
{
    char path[600];

    if (scdb_mkdir_p(b->cfg.data_dir, 0700)) {
        snprintf(errbuf, errlen, "cannot create data dir %s: %s", b->cfg.data_dir,
                 strerror(errno));
        return SCDB_ESYS;
    }
    snprintf(path, sizeof path, "%s/broker.lock", b->cfg.data_dir);
    b->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (b->lock_fd < 0) {
        snprintf(errbuf, errlen, "cannot open %s: %s", path, strerror(errno));
        return SCDB_ESYS;
    }
    if (flock(b->lock_fd, LOCK_EX | LOCK_NB)) {
        snprintf(errbuf, errlen, "data dir %s is in use by another broker", b->cfg.data_dir);
        return SCDB_EBUSY;
    }
    return SCDB_OK;
}

/* ------------------------------------------------------------ lifecycle */

scdb_err scdb_broker_new(const scdb_broker_config *c, scdb_broker **out, char *errbuf,
                         size_t errlen)
{
    scdb_broker *b;
    scdb_store_opts so;
    scdb_err e;
    char dummy[8];

    if (!errbuf) {
        errbuf = dummy;
        errlen = sizeof dummy;
    }
    *out = NULL;
    errbuf[0] = 0;
    e = check_config(c, errbuf, errlen);
    if (e) return e;
    b = calloc(1, sizeof *b);
    if (!b) return SCDB_ENOMEM;
    b->cfg = *c;
    b->cfg.models = NULL;
    b->cfg.codebooks = NULL;
    b->cfg.pairs = NULL;
    b->cfg.n_models = b->cfg.n_codebooks = b->cfg.n_pairs = 0;
    b->lock_fd = -1;
    bk_fd_init(b);
    b->sigpipe[0] = b->sigpipe[1] = -1;
    b->t_start = scdb_now();
    {
        char why[384];
        e = scdb_device_resolve(c->device, &b->device, why, sizeof why);
        if (e) {
            snprintf(errbuf, errlen, "device %s: %s", scdb_device_pref_name(c->device), why);
            goto fail;
        }
    }

    e = bk_trimmer_new(&b->trim);
    if (e) {
        snprintf(errbuf, errlen, "cannot start the heap trimmer thread");
        goto fail;
    }
    e = bk_registry_new(c, &b->reg, errbuf, errlen);
    if (e) goto fail;
    b->reg->trim = b->trim;
    /* before the data dir is created: a broker that cannot serve leaves
     * nothing behind */
    e = bk_check_endpoint_free(c, errbuf, errlen);
    if (e) goto fail;
    e = lock_data_dir(b, errbuf, errlen);
    if (e) goto fail;
    /* before the store, whose commits it takes: a wrong password or a bad
     * [remote] setting stops the start here */
    e = bk_remote_start(b, errbuf, errlen);
    if (e) goto fail;
    memset(&so, 0, sizeof so);
    so.path = c->data_dir;
    so.block_tokens = c->block_tokens;
    so.disk_capacity_bytes = c->disk_capacity;
    so.hot_capacity_bytes = c->hot_capacity;
    if (c->gpu_hot_capacity && b->device != SCDB_DEV_CUDA) {
        scdb_warn("gpu_hot_capacity %llu ignored: the broker decodes on the CPU; the hot tier "
                  "stays in RAM (hot_capacity %llu)", (unsigned long long)c->gpu_hot_capacity,
                  (unsigned long long)c->hot_capacity);
    } else if (c->gpu_hot_capacity) {
        e = scdb_tier_device_new(SCDB_DEV_CUDA, c->gpu_hot_capacity, &so.hot_tier);
        if (e) {
            snprintf(errbuf, errlen, "cannot create the GPU hot tier: %s", scdb_strerror(e));
            goto fail;
        }
        b->hot_on_device = 1;
        scdb_info("hot tier: %llu bytes of CUDA device memory (gpu_hot_capacity), in place of "
                  "the RAM tier", (unsigned long long)c->gpu_hot_capacity);
    }
    so.map_size = c->map_size;
    so.max_map_size = c->max_map_size;
    so.no_sync = c->no_sync;
    so.on_visible = bk_lix_on_visible;
    so.on_visible_ctx = b;
    if (b->remote) {
        so.on_written = bk_remote_on_written;
        so.on_written_ctx = b;
    }
    e = scdb_store_open(&so, &b->store);
    if (e) {
        snprintf(errbuf, errlen, "cannot open the store in %s: %s", c->data_dir,
                 scdb_strerror(e));
        goto fail;
    }
    b->block_tokens = scdb_store_block_tokens(b->store);
    if (getrandom(&b->instance, sizeof b->instance, 0) != sizeof b->instance)
        b->instance = (uint64_t)scdb_now_ns() ^ ((uint64_t)getpid() << 32);
    e = bk_lix_start(b, errbuf, errlen);
    if (e) goto fail;

    b->zctx = zmq_ctx_new();
    if (!b->zctx) {
        snprintf(errbuf, errlen, "zmq_ctx_new: %s", zmq_strerror(zmq_errno()));
        e = SCDB_ESYS;
        goto fail;
    }
    b->done = zmq_socket(b->zctx, ZMQ_PULL);
    {
        int hwm = 0;
        if (!b->done || zmq_setsockopt(b->done, ZMQ_RCVHWM, &hwm, sizeof hwm) ||
            zmq_bind(b->done, DONE_ENDPOINT)) {
            snprintf(errbuf, errlen, "inproc bind: %s", zmq_strerror(zmq_errno()));
            e = SCDB_ESYS;
            goto fail;
        }
    }
    e = bk_listen(b, errbuf, errlen);
    if (e) goto fail;
    e = bk_fd_start(b, errbuf, errlen);
    if (e) goto fail;
    if (pipe(b->sigpipe) || fcntl(b->sigpipe[0], F_SETFL, O_NONBLOCK) ||
        fcntl(b->sigpipe[1], F_SETFL, O_NONBLOCK) || fcntl(b->sigpipe[0], F_SETFD, FD_CLOEXEC) ||
        fcntl(b->sigpipe[1], F_SETFD, FD_CLOEXEC)) {
        snprintf(errbuf, errlen, "pipe: %s", strerror(errno));
        e = SCDB_ESYS;
        goto fail;
    }
    e = bk_threads_start(b, errbuf, errlen);
    if (e) goto fail;
    bk_remote_watch(b, 1);      /* the writer refreshes what others replace */
    e = bk_metrics_start(b, errbuf, errlen);
    if (e) goto fail;
    *out = b;
    return SCDB_OK;
fail:
    scdb_broker_free(&b);
    return e;
}

void scdb_broker_free(scdb_broker **bp)
{
    scdb_broker *b;
    bk_job *j;

    if (!bp || !*bp) return;
    b = *bp;
    bk_metrics_stop(b);      /* first: its thread waits on this loop */
    bk_reload_stop(b);
    bk_remote_watch(b, 0);      /* no refresh job queued past this */
    bk_threads_stop(b);
    /* jobs that finished after the loop ended (drain timeout) */
    while (b->done && zmq_recv(b->done, &j, sizeof j, ZMQ_DONTWAIT) == (int)sizeof j)
        bk_job_done(b, j);
    bk_clients_drop_all(b);
    bk_lix_stop(b);
    bk_fd_stop(b);           /* after everything that held a ticket */
    for (int i = 0; i < b->n_router; i++) zmq_close(b->router[i]);
    for (int i = b->n_router; i < BK_MAX_ROUTERS; i++)
        if (b->router[i]) zmq_close(b->router[i]);
    if (b->done) zmq_close(b->done);
    if (b->zap) zmq_close(b->zap);
    free(b->allow);
    if (b->zctx) zmq_ctx_term(b->zctx);
    if (b->ipc_path[0] && b->n_router > 0 && unlink(b->ipc_path) && errno != ENOENT)
        scdb_warn("unlink %s: %s", b->ipc_path, strerror(errno));
    if (b->store) scdb_store_close(&b->store);
    bk_remote_stop(b);          /* after the threads: sends what it can, ~1 s */
    bk_registry_unref(b->reg);
    bk_trimmer_free(&b->trim);  /* after the last registry: its trim runs */
    if (b->lock_fd >= 0) close(b->lock_fd);
    if (b->sigpipe[0] >= 0) close(b->sigpipe[0]);
    if (b->sigpipe[1] >= 0) close(b->sigpipe[1]);
    free(b);
    *bp = NULL;
}

/* ------------------------------------------------------------ event loop */

/* A stop signal sets g_stop_sig (from the start of the process, when
 * scdb_broker_catch_signals ran) and, once the loop runs, wakes it through
 * the self-pipe.  Any thread may take the signal (OpenBLAS and ZeroMQ start
 * their own), so it is caught, never blocked.  SIGHUP sets g_hup instead:
 * a reload (reload.c), never a stop; one during start-up is taken when the
 * loop starts.  The pipe only wakes the loop (a metrics scrape and a
 * finished reload write to it too): the flags say what happened. */
static volatile sig_atomic_t g_stop_sig, g_hup;
static volatile int g_sig_fd = -1;

static void on_signal(int sig)
{
    int saved = errno;
    char ch = (char)sig;
    if (sig == SIGHUP)
        g_hup = 1;
    else
        g_stop_sig = sig;
    if (g_sig_fd >= 0) (void)!write(g_sig_fd, &ch, 1);
    errno = saved;
}

void scdb_broker_catch_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

void scdb_broker_stop(scdb_broker *b)
{
    char ch = 0;
    if (!b) return;
    b->stopping = 1;
    if (b->sigpipe[1] >= 0) (void)!write(b->sigpipe[1], &ch, 1);
}

void scdb_broker_set_reload(scdb_broker *b,
                            scdb_err (*load)(void *ctx, scdb_broker_config *out,
                                             char *errbuf, size_t errlen),
                            void *ctx)
{
    if (!b) return;
    b->reload_fn = load;
    b->reload_ctx = ctx;
}

/* Receive one multipart message from router s and handle it.  1: handled,
 * 0: nothing waiting, -1: socket error. */
static int recv_one(scdb_broker *b, int s)
{
    zmq_msg_t stack[8], *f = stack;
    int n = 0, cap = 8, more, too_big = 0, rc = 1;
    uint64_t total = 0;
    uint64_t max_frames = 3 + b->cfg.max_tokens / (b->block_tokens ? b->block_tokens : 1);

    do {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, b->router[s], n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
            int err = zmq_errno();
            zmq_msg_close(&m);
            if (err == EINTR && n > 0) {
                more = 1;
                continue;
            }
            if (n == 0 && (err == EAGAIN || err == EINTR)) return 0;
            scdb_error("receive: %s", zmq_strerror(err));
            rc = -1;
            break;
        }
        more = zmq_msg_more(&m);
        if (n >= 1) total += zmq_msg_size(&m);
        if (n >= 2 && (too_big || total > b->cfg.max_request_bytes || (uint64_t)n >= max_frames)) {
            too_big = 1;          /* keep identity and request: reply with the id */
            zmq_msg_close(&m);
            continue;
        }
        if (n == cap) {
            zmq_msg_t *g = malloc((size_t)cap * 2 * sizeof *g);
            if (!g) {
                too_big = 1;
                zmq_msg_close(&m);
                continue;
            }
            for (int i = 0; i < n; i++) {
                zmq_msg_init(&g[i]);
                zmq_msg_move(&g[i], &f[i]);
                zmq_msg_close(&f[i]);
            }
            if (f != stack) free(f);
            f = g;
            cap *= 2;
        }
        zmq_msg_init(&f[n]);
        zmq_msg_move(&f[n], &m);
        zmq_msg_close(&m);
        n++;
    } while (more);

    if (rc == 1 && n >= 1) bk_handle(b, s, f, n, too_big, total);
    for (int i = 0; i < n; i++) zmq_msg_close(&f[i]);
    if (f != stack) free(f);
    return rc;
}

scdb_err scdb_broker_run(scdb_broker *b)
{
    struct sigaction sa, old_term, old_int, old_pipe, old_hup;
    zmq_pollitem_t items[BK_MAX_ROUTERS + 3];
    int n_items = 0, i_done, i_sig, i_zap = -1;
    double deadline = 0, sweep_every;
    scdb_err result = SCDB_OK;

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    g_sig_fd = b->sigpipe[1];
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGHUP, &sa, &old_hup);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, &old_pipe);
    if (g_stop_sig) scdb_broker_stop(b);  /* caught before the loop was ready */
    for (int i = 0; i < b->n_router; i++)
        items[n_items++] = (zmq_pollitem_t){.socket = b->router[i], .events = ZMQ_POLLIN};
    i_done = n_items;
    items[n_items++] = (zmq_pollitem_t){.socket = b->done, .events = ZMQ_POLLIN};
    i_sig = n_items;
    items[n_items++] = (zmq_pollitem_t){.fd = b->sigpipe[0], .events = ZMQ_POLLIN};
    if (b->zap) {
        i_zap = n_items;
        items[n_items++] = (zmq_pollitem_t){.socket = b->zap, .events = ZMQ_POLLIN};
    }

    /* this thread holds the lookup index's liveness lock from now on, before
     * any hello hands the index out (lookup_index.h, LIVENESS) */
    bk_lix_tick(b, scdb_now_ns());
    sweep_every = b->cfg.heartbeat_timeout_ms / 10000.0;
    if (sweep_every > 0.25) sweep_every = 0.25;
    b->next_sweep = scdb_now() + sweep_every;
    scdb_info("scdb-broker %s serving %s%s%s (socket mode %04o), data %s, %u-token blocks, "
              "%d workers + %d eviction thread%s, heartbeat %d ms / timeout %d ms",
              SCDB_BROKER_VERSION, b->cfg.endpoint, b->n_router > 1 ? " and CURVE " : "",
              b->n_router > 1 ? b->cfg.tcp_endpoint : "", b->cfg.socket_mode, b->cfg.data_dir,
              b->block_tokens, b->n_workers, b->n_evictors, b->n_evictors == 1 ? "" : "s", b->cfg.heartbeat_ms, b->cfg.heartbeat_timeout_ms);
    if (b->n_router > 1)
        scdb_info("tcp: %s", b->zap ? "only the CURVE client keys of curve_allow_file are let in"
                                    : "any CURVE client that knows the server's public key is "
                                      "let in (set curve_allow_file to restrict)");
    for (int i = 0; i < b->reg->n_codebooks; i++)
        scdb_info("codebook %s (%s, producer %s): %llu payload bytes per token",
                  b->reg->codebooks[i].name, b->reg->codebooks[i].kind,
                  b->reg->codebooks[i].producer->name,
                  (unsigned long long)b->reg->codebooks[i].token_bytes);
    {
        char st[1100];
        snprintf(st, sizeof st, "READY=1\nSTATUS=serving %.512s, data %.512s",
                 b->cfg.endpoint, b->cfg.data_dir);
        bk_notify(st);
    }

    for (;;) {
        double now;
        int rc = zmq_poll(items, n_items, 100);

        if (rc < 0 && zmq_errno() != EINTR) {
            scdb_error("poll: %s", zmq_strerror(zmq_errno()));
            result = SCDB_ESYS;
            break;
        }
        if (rc > 0 && (items[i_sig].revents & ZMQ_POLLIN)) {
            char buf[64];
            while (read(b->sigpipe[0], buf, sizeof buf) > 0) {}
        }
        if (g_stop_sig) b->stopping = 1;
        if (g_hup) {
            g_hup = 0;
            if (b->stopping)
                scdb_info("SIGHUP ignored: shutting down");
            else
                bk_reload_request(b);
        }
        bk_reload_poll(b);
        bk_metrics_poll(b);
        if (b->stopping && !b->draining) {
            b->draining = 1;
            deadline = scdb_now() + b->cfg.drain_timeout_ms / 1000.0;
            bk_notify("STOPPING=1\nSTATUS=draining");
            scdb_info("shutting down: draining %d request(s) in flight", b->inflight);
        }
        if (rc > 0 && i_zap >= 0 && (items[i_zap].revents & ZMQ_POLLIN)) {
            int ev = 0;
            size_t evl = sizeof ev;
            do {
                bk_zap_answer(b);
            } while (!zmq_getsockopt(b->zap, ZMQ_EVENTS, &ev, &evl) && (ev & ZMQ_POLLIN));
        }
        if (rc > 0 && (items[i_done].revents & ZMQ_POLLIN)) {
            bk_job *j;
            while (zmq_recv(b->done, &j, sizeof j, ZMQ_DONTWAIT) == (int)sizeof j)
                bk_job_done(b, j);
        }
        for (int s = 0; rc > 0 && s < b->n_router; s++) {
            if (!(items[s].revents & ZMQ_POLLIN)) continue;
            for (int k = 0; k < MAX_BATCH; k++) {
                int got = recv_one(b, s);
                if (got <= 0) break;
            }
        }
        now = scdb_now();
        bk_lix_tick(b, scdb_now_ns());
        if (now >= b->next_sweep) {
            bk_clients_sweep(b, now);
            b->next_sweep = now + sweep_every;
        }
        if (b->draining && b->inflight == 0) break;
        if (b->draining && now > deadline) {
            scdb_error("drain timed out after %d ms with %d request(s) in flight",
                       b->cfg.drain_timeout_ms, b->inflight);
            result = SCDB_ETIMEDOUT;
            break;
        }
    }
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGHUP, &old_hup, NULL);
    sigaction(SIGPIPE, &old_pipe, NULL);
    g_sig_fd = -1;
    if (result == SCDB_OK) scdb_info("drained; %llu requests served", (unsigned long long)b->requests);
    return result;
}
