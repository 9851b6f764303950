/* Redis Cluster routing without I/O: slots, the slot map, redirections. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "reply.h"
#include "xfetch.h"

/* CRC16 XMODEM four bits at a time: entry i is the remainder of i << 12. */
static const uint16_t crc_nibble[16] = {0x0000, 0x1021, 0x2042, 0x3063, 0x4084, 0x50a5,
                                        0x60c6, 0x70e7, 0x8108, 0x9129, 0xa14a, 0xb16b,
                                        0xc18c, 0xd1ad, 0xe1ce, 0xf1ef};

uint16_t xf__crc16(const char *buf, size_t len) {
  uint16_t crc = 0;
  for (size_t i = 0; i < len; i++) {
    unsigned char b = (unsigned char)buf[i];
    crc = (uint16_t)((crc << 4) ^ crc_nibble[(crc >> 12) ^ (b >> 4)]);
    crc = (uint16_t)((crc << 4) ^ crc_nibble[(crc >> 12) ^ (b & 0x0f)]);
  }
  return crc;
}

int xf__cluster_keyslot(const char *key, size_t len) {
  const char *open = len ? memchr(key, '{', len) : NULL;
  if (open) {
    size_t after = (size_t)(open - key) + 1;
    const char *close = memchr(open + 1, '}', len - after);
    if (close && close > open + 1) /* "{}" is no tag: the whole key is hashed */
      return xf__crc16(open + 1, (size_t)(close - open - 1)) & (XF_CLUSTER_SLOTS - 1);
  }
  return xf__crc16(key, len) & (XF_CLUSTER_SLOTS - 1);
}

/* --- The slot map ------------------------------------------------------------ */

void xf__cluster_map_init(xf__cluster_map *m) {
  m->nodes = NULL;
  m->nnodes = m->cap = 0;
  for (int i = 0; i < XF_CLUSTER_SLOTS; i++)
    m->slots[i] = -1;
}

void xf__cluster_map_free(xf__cluster_map *m) {
  if (!m)
    return;
  for (int i = 0; i < m->nnodes; i++) {
    free(m->nodes[i].host);
    free(m->nodes[i].id);
  }
  free(m->nodes);
  xf__cluster_map_init(m);
}

int xf__cluster_map_find(const xf__cluster_map *m, const char *host, int port) {
  for (int i = 0; i < m->nnodes; i++)
    if (m->nodes[i].port == port && strcmp(m->nodes[i].host, host) == 0)
      return i;
  return -1;
}

/* Returns the index of host:port, appending it (with master = -2: role not
 * known yet) if new; XF_ENOMEM, or XF_EPROTO past what a slot can index. */
static int add_node(xf__cluster_map *m, const char *host, size_t hostlen, int port) {
  char name[XF_CLUSTER_HOST_MAX];
  if (hostlen >= sizeof name)
    return XF_EPROTO;
  memcpy(name, host, hostlen);
  name[hostlen] = '\0';
  int at = xf__cluster_map_find(m, name, port);
  if (at >= 0)
    return at;
  if (m->nnodes == INT16_MAX)
    return XF_EPROTO;
  if (m->nnodes == m->cap) {
    int cap = m->cap ? m->cap * 2 : 8;
    xf__cluster_node *nodes = realloc(m->nodes, (size_t)cap * sizeof *nodes);
    if (!nodes)
      return XF_ENOMEM;
    m->nodes = nodes;
    m->cap = cap;
  }
  char *copy = strdup(name);
  if (!copy)
    return XF_ENOMEM;
  m->nodes[m->nnodes] = (xf__cluster_node){.host = copy, .port = port, .master = -2};
  return m->nnodes++;
}

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return XF_EPROTO;
}

/* Parsing state: the map being built and where to write the message. */
typedef struct parse {
  xf__cluster_map *m;
  const char *seed_host;
  char *err;
  size_t errlen;
} parse;

/* Adds the node described by [host, port, id, ...]; *index is -1 when its
 * endpoint is "?" (not known yet). */
static int parse_node(parse *p, const xf__reply *n, size_t range, int *index) {
  *index = -1;
  if (n->type != XF_REPLY_ARRAY || n->elements < 2)
    return fail(p->err, p->errlen,
                "CLUSTER SLOTS: range %zu: a node is not [host, port, ...]", range);
  const xf__reply *host = n->element[0], *port = n->element[1];
  const xf__reply *id = n->elements > 2 ? n->element[2] : NULL;
  if ((host->type != XF_REPLY_STRING && host->type != XF_REPLY_NIL) ||
      port->type != XF_REPLY_INTEGER || port->integer <= 0 || port->integer > 65535 ||
      (id && id->type != XF_REPLY_STRING))
    return fail(p->err, p->errlen, "CLUSTER SLOTS: range %zu: bad node host, port or id",
                range);
  const char *name = host->type == XF_REPLY_STRING ? host->str : "";
  size_t namelen = host->type == XF_REPLY_STRING ? host->len : 0;
  if (namelen == 1 && name[0] == '?')
    return XF_OK;
  if (namelen == 0) { /* nil or "": reach it where CLUSTER SLOTS was asked */
    name = p->seed_host ? p->seed_host : "";
    namelen = strlen(name);
  }
  if (namelen == 0 || memchr(name, '\0', namelen))
    return fail(p->err, p->errlen, "CLUSTER SLOTS: range %zu: node without a usable host",
                range);
  int at = add_node(p->m, name, namelen, (int)port->integer);
  if (at == XF_ENOMEM)
    return at;
  if (at < 0)
    return fail(p->err, p->errlen,
                "CLUSTER SLOTS: range %zu: host too long or too many nodes", range);
  xf__cluster_node *node = &p->m->nodes[at];
  if (id && !node->id && !(node->id = strndup(id->str, id->len)))
    return XF_ENOMEM;
  *index = at;
  return XF_OK;
}

static int parse_range(parse *p, const xf__reply *r, size_t i) {
  if (r->type != XF_REPLY_ARRAY || r->elements < 3 ||
      r->element[0]->type != XF_REPLY_INTEGER || r->element[1]->type != XF_REPLY_INTEGER)
    return fail(p->err, p->errlen,
                "CLUSTER SLOTS: range %zu is not [start, end, master, ...]", i);
  long long start = r->element[0]->integer, end = r->element[1]->integer;
  if (start < 0 || end < start || end >= XF_CLUSTER_SLOTS)
    return fail(p->err, p->errlen, "CLUSTER SLOTS: range %zu: bad slots %lld-%lld", i,
                start, end);
  int master;
  int rc = parse_node(p, r->element[2], i, &master);
  if (rc != XF_OK)
    return rc;
  if (master >= 0) {
    p->m->nodes[master].master = -1; /* a master anywhere is a master */
    for (long long s = start; s <= end; s++) {
      if (p->m->slots[s] != -1)
        return fail(p->err, p->errlen, "CLUSTER SLOTS: slot %lld is in two ranges", s);
      p->m->slots[s] = (int16_t)master;
    }
  }
  for (size_t k = 3; k < r->elements; k++) {
    int replica;
    if ((rc = parse_node(p, r->element[k], i, &replica)) != XF_OK)
      return rc;
    if (replica >= 0 && master >= 0 && replica != master &&
        p->m->nodes[replica].master == -2)
      p->m->nodes[replica].master = master;
  }
  return XF_OK;
}

int xf__cluster_map_parse(xf__cluster_map *m, const xf__reply *r, const char *seed_host,
                          char *err, size_t errlen) {
  xf__cluster_map next;
  xf__cluster_map_init(&next);
  parse p = {&next, seed_host, err, errlen};
  int rc = XF_OK;
  if (!r)
    rc = fail(err, errlen, "CLUSTER SLOTS: no reply");
  else if (r->type == XF_REPLY_ERROR)
    rc = fail(err, errlen, "CLUSTER SLOTS: %s", r->str);
  else if (r->type != XF_REPLY_ARRAY)
    rc = fail(err, errlen, "CLUSTER SLOTS: reply is not an array");
  for (size_t i = 0; rc == XF_OK && i < r->elements; i++)
    rc = parse_range(&p, r->element[i], i);
  if (rc == XF_ENOMEM)
    fail(err, errlen, "CLUSTER SLOTS: out of memory");
  for (int i = 0; rc == XF_OK && i < next.nnodes; i++)
    if (next.nodes[i].master == -2) /* only seen as a replica of a "?" master */
      next.nodes[i].master = -1;
  xf__cluster_map_free(m);
  if (rc != XF_OK) {
    xf__cluster_map_free(&next);
    return rc;
  }
  *m = next;
  return XF_OK;
}

int xf__cluster_map_master(const xf__cluster_map *m, int slot) {
  return slot >= 0 && slot < XF_CLUSTER_SLOTS ? m->slots[slot] : -1;
}

int xf__cluster_map_covered(const xf__cluster_map *m) {
  int n = 0;
  for (int i = 0; i < XF_CLUSTER_SLOTS; i++)
    n += m->slots[i] >= 0;
  return n;
}

int xf__cluster_map_replicas(const xf__cluster_map *m, int master, int *out, int max) {
  int n = 0;
  for (int i = 0; master >= 0 && i < m->nnodes; i++)
    if (m->nodes[i].master == master) {
      if (n < max)
        out[n] = i;
      n++;
    }
  return n;
}

int xf__cluster_map_set_slot(xf__cluster_map *m, int slot, const char *host, int port) {
  if (slot < 0 || slot >= XF_CLUSTER_SLOTS || port <= 0 || port > 65535 || !host || !*host)
    return XF_EINVAL;
  int at = add_node(m, host, strlen(host), port);
  if (at == XF_EPROTO)
    return XF_EINVAL;
  if (at < 0)
    return at;
  /* A replica promoted by a failover now serves slots: it is a master. */
  m->nodes[at].master = -1;
  m->slots[slot] = (int16_t)at;
  return at;
}

/* --- Redirections ------------------------------------------------------------ */

static int has_word(const char *msg, size_t len, const char *word) {
  size_t n = strlen(word);
  return len >= n && memcmp(msg, word, n) == 0 && (len == n || msg[n] == ' ');
}

/* Reads a decimal in [0, max] from s[0..len); returns it or -1. */
static long parse_uint(const char *s, size_t len, long max) {
  if (len == 0 || len > 10)
    return -1;
  long v = 0;
  for (size_t i = 0; i < len; i++) {
    if (s[i] < '0' || s[i] > '9')
      return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v <= max ? v : -1;
}

/* "<slot> <host>:<port>", the host possibly empty or an IPv6 address (Redis
 * writes it without brackets: the port follows the last ':'). */
static int parse_target(const char *s, size_t len, xf__cluster_redirect *out) {
  const char *space = memchr(s, ' ', len);
  if (!space)
    return XF_EPROTO;
  long slot = parse_uint(s, (size_t)(space - s), XF_CLUSTER_SLOTS - 1);
  const char *ep = space + 1;
  size_t eplen = len - (size_t)(ep - s);
  const char *colon = NULL;
  for (size_t i = 0; i < eplen; i++)
    if (ep[i] == ':')
      colon = ep + i;
  if (slot < 0 || !colon)
    return XF_EPROTO;
  size_t hostlen = (size_t)(colon - ep);
  long port = parse_uint(colon + 1, eplen - hostlen - 1, 65535);
  if (port <= 0 || hostlen >= sizeof out->host || memchr(ep, ' ', eplen) ||
      memchr(ep, '\0', hostlen))
    return XF_EPROTO;
  memcpy(out->host, ep, hostlen);
  out->host[hostlen] = '\0';
  out->slot = (int)slot;
  out->port = (int)port;
  return XF_OK;
}

int xf__cluster_redirect_parse(const char *msg, size_t len, xf__cluster_redirect *out) {
  *out = (xf__cluster_redirect){.kind = XF_CLUSTER_REPLY, .slot = -1};
  if (!msg)
    return XF_OK;
  xf__cluster_kind kind = XF_CLUSTER_REPLY;
  size_t skip = 0;
  if (has_word(msg, len, "MOVED"))
    kind = XF_CLUSTER_MOVED, skip = 6;
  else if (has_word(msg, len, "ASK"))
    kind = XF_CLUSTER_ASK, skip = 4;
  else if (has_word(msg, len, "TRYAGAIN"))
    kind = XF_CLUSTER_TRYAGAIN;
  else if (has_word(msg, len, "CLUSTERDOWN"))
    kind = XF_CLUSTER_DOWN;
  if (skip) {
    if (len <= skip || parse_target(msg + skip, len - skip, out) != XF_OK) {
      *out = (xf__cluster_redirect){.kind = XF_CLUSTER_REPLY, .slot = -1};
      return XF_EPROTO;
    }
  }
  out->kind = kind;
  return XF_OK;
}

/* Why following each decision cannot corrupt an entry:
 * - MOVED / ASK: the node refused the command before running it (the key's
 *   slot is not served there), so nothing happened; resending it elsewhere is
 *   its first execution.
 * - TRYAGAIN: likewise refused before running (keys of the slot are split
 *   between two nodes mid-migration).
 * - CLUSTERDOWN: refused before running as well. The one step whose outcome
 *   is unknown is a timeout or a dropped connection after sending; the router
 *   may resend it too, because every script is safe to repeat: read writes
 *   nothing; lease only takes a lease that is absent or dead, and a repeat
 *   by the same caller finds its own live lease and loses at worst (the
 *   caller then ducks out or waits, as for any lost lease); write and release
 *   act only with the caller's token, and write refuses a value older
 *   (by `s`, the server start time) than the stored one, so a repeated write
 *   stores the same value again or nothing (newer wins).
 * The limit ends ping-pong between nodes that disagree on a slot. */
int xf__cluster_retry_delay_ms(xf__cluster_kind kind, int attempt) {
  if (attempt < 1 || attempt > XF_CLUSTER_MAX_REDIRECTS)
    return -1;
  switch (kind) {
  case XF_CLUSTER_MOVED:
  case XF_CLUSTER_ASK:
    return 0;
  case XF_CLUSTER_TRYAGAIN: /* a migration moves keys in ms: 10, 20, 40, 80, 160 */
  case XF_CLUSTER_DOWN:     /* a failover lasts about a node timeout, longer than a call
                               should wait: after the limit the caller fails open */
    return 10 << (attempt - 1);
  default:
    return -1;
  }
}

/* --- Detection --------------------------------------------------------------- */

int xf__cluster_info_enabled(const char *info, size_t len) {
  static const char field[] = "cluster_enabled:";
  const size_t flen = sizeof field - 1;
  size_t at = 0;
  while (info && at < len) {
    const char *nl = memchr(info + at, '\n', len - at);
    size_t end = nl ? (size_t)(nl - info) : len;
    size_t line = end - at;
    if (line && info[end - 1] == '\r')
      line--;
    if (line == flen + 1 && memcmp(info + at, field, flen) == 0) {
      char v = info[at + flen];
      if (v == '0' || v == '1')
        return v - '0';
      return XF_EPROTO;
    }
    at = end + 1;
  }
  return XF_EPROTO;
}
