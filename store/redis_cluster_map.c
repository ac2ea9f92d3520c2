/* redis_cluster_map.c — slots (CRC16-XMODEM, hash tags), addresses, and the
 * two cluster replies that carry topology: CLUSTER SLOTS and MOVED/ASK.
 * Pure functions: no sockets, no handle. */
#include "redis_cluster_int.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- slots */

/* CRC16 with polynomial 0x1021, initial value 0, no reflection, no final
 * xor (XMODEM), one bit at a time: a key is hashed once per command, and a
 * few dozen bytes are not worth a table. */
uint16_t scdb_rc_crc16(const void *buf, size_t len)
{
    const unsigned char *p = buf;
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)(p[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

unsigned scdb_rc_slot(const void *key, size_t len)
{
    const char *k = key;
    if (!k || len == 0) return scdb_rc_crc16("", 0) & (SCDB_RC_SLOTS - 1);
    const char *open = memchr(k, '{', len);
    if (open) {
        size_t after = (size_t)(open - k) + 1;
        const char *close = memchr(open + 1, '}', len - after);
        if (close && close > open + 1)
            return scdb_rc_crc16(open + 1, (size_t)(close - open - 1)) & (SCDB_RC_SLOTS - 1);
    }
    return scdb_rc_crc16(k, len) & (SCDB_RC_SLOTS - 1);
}

/* ------------------------------------------------------------ addresses */

static bool is_numeric_host(const char *h)
{
    unsigned char buf[16];
    return inet_pton(AF_INET, h, buf) == 1 || inet_pton(AF_INET6, h, buf) == 1;
}

/* Host names (seeds only): letters, digits, '-', '.', ':' (IPv6). */
static bool is_plausible_host(const char *h)
{
    if (!*h) return false;
    for (const char *c = h; *c; c++)
        if (!isalnum((unsigned char)*c) && *c != '-' && *c != '.' && *c != ':' && *c != '_')
            return false;
    return true;
}

static bool parse_port(const char *s, size_t len, int *port)
{
    if (len == 0 || len > 5) return false;
    int v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        v = v * 10 + (s[i] - '0');
    }
    if (v < 1 || v > 65535) return false;
    *port = v;
    return true;
}

/* host:port, the port after the last ':' (so "::1:7000" is IPv6 ::1).  An
 * empty host is returned as "" for the caller to fill in. */
scdb_err rc_parse_addr(const char *s, size_t len, bool numeric_only,
                       char host[RC_HOST_MAX], int *port)
{
    const char *colon = NULL;
    for (size_t i = 0; i < len; i++)
        if (s[i] == ':') colon = s + i;
    if (!colon) return SCDB_EPROTO;
    size_t hlen = (size_t)(colon - s);
    if (hlen >= RC_HOST_MAX || memchr(s, '\0', hlen)) return SCDB_EPROTO;
    if (!parse_port(colon + 1, len - hlen - 1, port)) return SCDB_EPROTO;
    if (hlen > 1 && s[0] == '[' && s[hlen - 1] == ']') { /* [v6]:port */
        memcpy(host, s + 1, hlen - 2);
        host[hlen - 2] = '\0';
    } else {
        memcpy(host, s, hlen);
        host[hlen] = '\0';
    }
    if (!host[0]) return SCDB_OK;
    if (numeric_only ? !is_numeric_host(host) : !is_plausible_host(host))
        return SCDB_EPROTO;
    return SCDB_OK;
}

/* ---------------------------------------------------------- CLUSTER SLOTS */

/* [ip, port, id?, ...] of one node in a range entry. */
static scdb_err parse_node(const redisReply *n, const char *asked_host, char host[RC_HOST_MAX],
                           int *port, bool *unknown, char *why, size_t why_len)
{
    *unknown = false;
    if (n->type != REDIS_REPLY_ARRAY || n->elements < 2 ||
        n->element[0]->type != REDIS_REPLY_STRING || n->element[1]->type != REDIS_REPLY_INTEGER) {
        rc_why(why, why_len, "CLUSTER SLOTS: a node entry is not [address, port, ...]");
        return SCDB_EPROTO;
    }
    const redisReply *ip = n->element[0];
    long long p = n->element[1]->integer;
    if (ip->len == 1 && ip->str[0] == '?') { /* endpoint unknown to the cluster */
        *unknown = true;
        return SCDB_OK;
    }
    if (p < 1 || p > 65535) {
        rc_why(why, why_len, "CLUSTER SLOTS: port %lld out of range", p);
        return SCDB_EPROTO;
    }
    if (ip->len >= RC_HOST_MAX || memchr(ip->str, '\0', ip->len)) {
        rc_why(why, why_len, "CLUSTER SLOTS: malformed address");
        return SCDB_EPROTO;
    }
    if (ip->len == 0) {
        rc_why(host, RC_HOST_MAX, "%s", asked_host);
    } else {
        memcpy(host, ip->str, ip->len);
        host[ip->len] = '\0';
        if (!is_numeric_host(host)) {
            rc_why(why, why_len, "CLUSTER SLOTS: address '%.64s' is not numeric "
                     "(cluster-preferred-endpoint-type must be ip)", host);
            return SCDB_EPROTO;
        }
    }
    *port = (int)p;
    return SCDB_OK;
}

static int cmp_range(const void *a, const void *b)
{
    const rc_range *x = a, *y = b;
    return (x->start > y->start) - (x->start < y->start);
}

scdb_err rc_parse_slots(const redisReply *r, const char *asked_host, rc_slotmap *out,
                        char *why, size_t why_len)
{
    scdb_err e = SCDB_OK;
    memset(out, 0, sizeof *out);
    if (!r || r->type != REDIS_REPLY_ARRAY) {
        if (r && r->type == REDIS_REPLY_ERROR)
            rc_why(why, why_len, "CLUSTER SLOTS refused: %.160s", r->str);
        else
            rc_why(why, why_len, "CLUSTER SLOTS: reply is not an array");
        return SCDB_EPROTO;
    }
    if (r->elements == 0) {
        rc_why(why, why_len, "CLUSTER SLOTS: no slot is assigned (cluster not set up)");
        return SCDB_EPROTO;
    }
    if (r->elements > SCDB_RC_SLOTS) {
        rc_why(why, why_len, "CLUSTER SLOTS: %zu ranges", r->elements);
        return SCDB_EPROTO;
    }
    size_t n_others_max = 0;
    for (size_t i = 0; i < r->elements; i++)
        if (r->element[i]->type == REDIS_REPLY_ARRAY && r->element[i]->elements > 3)
            n_others_max += r->element[i]->elements - 3;
    out->ranges = calloc(r->elements, sizeof *out->ranges);
    out->others = calloc(n_others_max ? n_others_max : 1, sizeof *out->others);
    if (!out->ranges || !out->others) {
        e = SCDB_ENOMEM;
        goto fail;
    }
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *g = r->element[i];
        if (g->type != REDIS_REPLY_ARRAY || g->elements < 3 ||
            g->element[0]->type != REDIS_REPLY_INTEGER || g->element[1]->type != REDIS_REPLY_INTEGER) {
            rc_why(why, why_len, "CLUSTER SLOTS: entry %zu is not [start, end, master, ...]", i);
            e = SCDB_EPROTO;
            goto fail;
        }
        long long s0 = g->element[0]->integer, s1 = g->element[1]->integer;
        if (s0 < 0 || s1 >= SCDB_RC_SLOTS || s0 > s1) {
            rc_why(why, why_len, "CLUSTER SLOTS: range %lld-%lld outside 0-16383", s0, s1);
            e = SCDB_EPROTO;
            goto fail;
        }
        bool unknown;
        rc_range *m = &out->ranges[out->n_ranges];
        e = parse_node(g->element[2], asked_host, m->host, &m->port, &unknown, why, why_len);
        if (e) goto fail;
        for (size_t j = 3; j < g->elements; j++) {
            rc_range *o = &out->others[out->n_others];
            bool unk2;
            e = parse_node(g->element[j], asked_host, o->host, &o->port, &unk2, why, why_len);
            if (e) goto fail;
            if (!unk2) out->n_others++;
        }
        if (unknown) continue; /* slots stay unmapped */
        m->start = (int)s0;
        m->end = (int)s1;
        out->n_ranges++;
    }
    if (out->n_ranges == 0) {
        rc_why(why, why_len, "CLUSTER SLOTS: no slot has a known address");
        e = SCDB_EPROTO;
        goto fail;
    }
    qsort(out->ranges, out->n_ranges, sizeof *out->ranges, cmp_range);
    for (size_t i = 1; i < out->n_ranges; i++)
        if (out->ranges[i].start <= out->ranges[i - 1].end) {
            rc_why(why, why_len, "CLUSTER SLOTS: ranges %d-%d and %d-%d overlap",
                     out->ranges[i - 1].start, out->ranges[i - 1].end,
                     out->ranges[i].start, out->ranges[i].end);
            e = SCDB_EPROTO;
            goto fail;
        }
    return SCDB_OK;
fail:
    rc_slotmap_free(out);
    return e;
}

void rc_slotmap_free(rc_slotmap *m)
{
    free(m->ranges);
    free(m->others);
    memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------ MOVED / ASK */

scdb_err rc_parse_redirect(const char *s, size_t len, const char *from_host, bool *is_ask,
                           int *slot, char host[RC_HOST_MAX], int *port)
{
    size_t skip;
    if (len > 6 && !memcmp(s, "MOVED ", 6)) {
        *is_ask = false;
        skip = 6;
    } else if (len > 4 && !memcmp(s, "ASK ", 4)) {
        *is_ask = true;
        skip = 4;
    } else {
        return SCDB_EPROTO;
    }
    const char *p = s + skip, *end = s + len;
    const char *sp = memchr(p, ' ', (size_t)(end - p));
    if (!sp || sp == p || sp - p > 5) return SCDB_EPROTO;
    int v = 0;
    for (const char *c = p; c < sp; c++) {
        if (*c < '0' || *c > '9') return SCDB_EPROTO;
        v = v * 10 + (*c - '0');
    }
    if (v >= SCDB_RC_SLOTS) return SCDB_EPROTO;
    *slot = v;
    const char *a = sp + 1;
    size_t alen = (size_t)(end - a);
    const char *sp2 = memchr(a, ' ', alen); /* tolerate trailing fields */
    if (sp2) alen = (size_t)(sp2 - a);
    if (rc_parse_addr(a, alen, true, host, port) != SCDB_OK) return SCDB_EPROTO;
    if (!host[0]) rc_why(host, RC_HOST_MAX, "%s", from_host);
    return SCDB_OK;
}
