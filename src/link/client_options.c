/* A client's options (client.c opens the client): checked, copied with
 * their defaults (the seed list parsed, the namespace built, the TLS context
 * made once), and duplicated whole for what reopens connections later. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "client_io.h"
#include "share.h"
#include "tls.h"

#define DEFAULT_TIMEOUT_MS 1000
#define DEFAULT_BREAKER_MS 1000
#define DEFAULT_MAX_KEY_LEN 65536
#define DEFAULT_MAX_VALUE_LEN (64u * 1024 * 1024)
#define DEFAULT_TOMBSTONE_MS 60000

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

/* Splits options.host ("a", "a:7000", "a:7000,b:7001", "[::1]:7000") into
 * seeds; an entry without a port takes options.port. */
static int parse_seeds(xf_client *c, const char *list, int port) {
  size_t n = 1;
  for (const char *p = list; *p; p++)
    n += *p == ',';
  c->seeds = calloc(n, sizeof *c->seeds);
  if (!c->seeds)
    return XF_ENOMEM;
  for (const char *p = list; *p || c->nseeds == 0;) {
    size_t len = strcspn(p, ",");
    char host[XF_CLUSTER_HOST_MAX];
    int seed_port = port;
    while (len > 0 && *p == ' ')
      p++, len--;
    const char *colon = memrchr(p, ':', len);
    const char *close = memchr(p, ']', len);
    if (*p == '[' && close) { /* [IPv6]:port */
      if (close + 1 < p + len && close[1] == ':')
        seed_port = atoi(close + 2);
      len = (size_t)(close - p - 1);
      p++;
    } else if (colon && memchr(p, ':', len) == colon) { /* host:port, not bare IPv6 */
      seed_port = atoi(colon + 1);
      len = (size_t)(colon - p);
    }
    if (len == 0 || len >= sizeof host || seed_port <= 0 || seed_port > 65535) {
      snprintf(c->errstr, sizeof c->errstr, "options.host: no host and port in \"%s\"",
               list);
      return XF_EINVAL;
    }
    memcpy(host, p, len);
    host[len] = '\0';
    if (xf__conn_init(&c->seeds[c->nseeds++], host, seed_port, NULL) != XF_OK)
      return XF_ENOMEM;
    p += strcspn(p, ",");
    if (*p == ',')
      p++;
  }
  return XF_OK;
}

/* The servers to connect to: options.unix_path, or options.host's list. The
 * first seed's host and port are the client's (the event-loop driver's). */
static int copy_servers(xf_client *c, const xf_options *o) {
  int port = o->port ? o->port : 6379;
  if (o->unix_path) {
    c->seeds = calloc(1, sizeof *c->seeds);
    if (!c->seeds || xf__conn_init(&c->seeds[0], NULL, 0, c->unix_path) != XF_OK)
      return XF_ENOMEM;
    c->nseeds = 1;
    c->host = strdup(o->host ? o->host : "127.0.0.1");
    c->port = port;
  } else {
    int rc = parse_seeds(c, o->host ? o->host : "127.0.0.1", port);
    if (rc != XF_OK)
      return rc;
    c->host = strdup(c->seeds[0].host);
    c->port = c->seeds[0].port;
  }
  return c->host ? XF_OK : XF_ENOMEM;
}

/* The client's namespace: "host:port,..." (or the unix path), db and user,
 * each ended by a NUL (none can hold one), so two clients have the same
 * namespace only when they talk to the same servers' same db as the same
 * user. The key prefix is already part of every Redis key. */
static int build_ns(xf_client *c) {
  size_t cap = 64 + (c->username ? strlen(c->username) : 0);
  for (int i = 0; i < c->nseeds; i++)
    cap += (c->seeds[i].host ? strlen(c->seeds[i].host) : strlen(c->unix_path)) + 8;
  if (!(c->ns = malloc(cap)))
    return XF_ENOMEM;
  size_t n = 0;
  for (int i = 0; i < c->nseeds; i++)
    n += (size_t)(c->seeds[i].host ? snprintf(c->ns + n, cap - n, "%s%s:%d", i ? "," : "",
                                              c->seeds[i].host, c->seeds[i].port)
                                   : snprintf(c->ns + n, cap - n, "unix:%s", c->unix_path));
  n += (size_t)snprintf(c->ns + n + 1, cap - n - 1, "%d", c->db) + 1;
  n += (size_t)snprintf(c->ns + n + 1, cap - n - 1, "%s", c->username ? c->username : "") +
       1;
  c->ns_len = n + 1; /* the last field's NUL */
  return XF_OK;
}

/* options.tls made ready once per client: every connection (seeds, cluster
 * nodes, reconnects) shares its trust store. A file that cannot be loaded
 * is XF_EINVAL, the reason on c. */
static int make_tls(xf_client *c, const xf_tls_options *t) {
  if (!t->enable)
    return XF_OK;
  xf__tls_config cfg = {.enable = 1,
                        .ca_file = t->ca_file,
                        .ca_dir = t->ca_dir,
                        .cert_file = t->cert_file,
                        .key_file = t->key_file,
                        .server_name = t->server_name,
                        .no_verify = t->no_verify};
  return xf__tls_new(&c->tls, &cfg, c->errstr, sizeof c->errstr);
}

int xf__client_options_copy(xf_client *c, const xf_options *o) {
  c->unix_path = dup_or_null(o->unix_path);
  c->username = dup_or_null(o->username);
  c->password = dup_or_null(o->password);
  c->prefix = strdup(o->key_prefix ? o->key_prefix : "");
  if (!c->prefix || (o->unix_path && !c->unix_path) || (o->username && !c->username) ||
      (o->password && !c->password))
    return XF_ENOMEM;
  int rc = copy_servers(c, o);
  if (rc != XF_OK)
    return rc;
  c->prefix_len = strlen(c->prefix);
  c->db = o->db;
  c->cluster = o->cluster;
  c->read_from_replicas = o->read_from_replicas;
  c->connect_timeout_ms =
      o->connect_timeout_ms ? o->connect_timeout_ms : DEFAULT_TIMEOUT_MS;
  c->command_timeout_ms =
      o->command_timeout_ms ? o->command_timeout_ms : DEFAULT_TIMEOUT_MS;
  /* WAIT's reply must come back within the command's own timeout */
  c->tag_wait_ms = c->command_timeout_ms > 1 ? c->command_timeout_ms / 2 : 1;
  c->wake_poll_ms = XF__WAKE_POLL_MS;
  c->breaker_ms = o->breaker_ms ? o->breaker_ms : DEFAULT_BREAKER_MS;
  c->max_key_len = o->max_key_len ? o->max_key_len : DEFAULT_MAX_KEY_LEN;
  c->max_value_len = o->max_value_len ? o->max_value_len : DEFAULT_MAX_VALUE_LEN;
  c->share = o->share;
  if (c->share)
    xf__share_ref(c->share); /* dropped by xf_client_close */
  c->near = o->share ? xf__share_near(o->share) : NULL;
  xf__ports_fill(c); /* what the flow calls of them (ports.h) */
  c->interrupt = o->interrupt;
  c->interrupt_ud = o->interrupt_ud;
  c->tombstone_ms = o->tombstone_ms ? o->tombstone_ms : DEFAULT_TOMBSTONE_MS;
  c->entry_format = o->entry_format ? o->entry_format : XF_ENTRY_STRING;
  c->namespace_tag = o->namespace_tag != 0;
  c->write_fence =
      o->write_fence == XF_FENCE_ON || (o->write_fence == XF_FENCE_AUTO && c->near);
  rc = make_tls(c, &o->tls);
  return rc == XF_OK ? build_ns(c) : rc;
}

xf_options *xf__options_dup(const xf_options *o) {
  const char *const *from[] = {&o->host,           &o->unix_path,     &o->username,
                               &o->password,       &o->key_prefix,    &o->tls.ca_file,
                               &o->tls.ca_dir,     &o->tls.cert_file, &o->tls.key_file,
                               &o->tls.server_name};
  size_t n = sizeof from / sizeof from[0], size = sizeof *o;
  for (size_t i = 0; i < n; i++)
    size += *from[i] ? strlen(*from[i]) + 1 : 0;
  xf_options *copy = malloc(size);
  if (!copy)
    return NULL;
  *copy = *o;
  const char **to[] = {&copy->host,           &copy->unix_path,     &copy->username,
                       &copy->password,       &copy->key_prefix,    &copy->tls.ca_file,
                       &copy->tls.ca_dir,     &copy->tls.cert_file, &copy->tls.key_file,
                       &copy->tls.server_name};
  char *at = (char *)(copy + 1);
  for (size_t i = 0; i < n; i++)
    if (*from[i]) {
      size_t len = strlen(*from[i]) + 1;
      *to[i] = memcpy(at, *from[i], len);
      at += len;
    }
  return copy;
}

/* The first option out of its range, named in why. */
int xf__options_check(const xf_options *o, char *why, size_t len) {
  const char *bad =
      o->port < 0 || o->port > 65535 ? "options.port is not in 0..65535"
      : o->db < 0                    ? "options.db is negative"
      : o->connect_timeout_ms < 0    ? "options.connect_timeout_ms is negative"
      : o->command_timeout_ms < 0    ? "options.command_timeout_ms is negative"
      : o->tombstone_ms < 0 || o->tombstone_ms > ((int64_t)1 << 40)
          ? "options.tombstone_ms is not in 0..2^40"
      : o->cluster < XF_CLUSTER_AUTO || o->cluster > XF_CLUSTER_OFF
          ? "options.cluster is not an xf_cluster_mode"
      : o->entry_format < XF_ENTRY_DEFAULT || o->entry_format > XF_ENTRY_STRING
          ? "options.entry_format is not an xf_entry_format"
      : o->write_fence < XF_FENCE_AUTO || o->write_fence > XF_FENCE_OFF
          ? "options.write_fence is not an xf_fence_mode"
      : o->cluster == XF_CLUSTER_ON && o->unix_path
          ? "options.cluster XF_CLUSTER_ON with a unix_path: a cluster is "
            "reached over TCP"
          : NULL;
  if (bad && why)
    snprintf(why, len, "%s", bad);
  return bad ? XF_EINVAL : XF_OK;
}
