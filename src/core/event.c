/* Building events for the hook (event.h) and their names. */
#include "event.h"
#include "flow.h"

static const char *const type_names[] = {
    "hit",          "miss",         "early",        "stale",           "fail_open",
    "near",         "lease_won",    "lease_lost",   "load_start",      "load_done",
    "wait",         "local",        "superseded",   "breaker_opened",  "breaker_closed",
    "reconnect",    "redirect",     "invalidation", "tag_invalidated", "lease_renewed",
    "soft_timeout", "hard_timeout", "failsafe",     "revalidated"};

static const char *const driver_names[] = {"blocking", "batch", "pool", "async", "call"};

const char *xf_event_name(int type) {
  return type >= 0 && type < (int)(sizeof type_names / sizeof *type_names)
             ? type_names[type]
             : "?";
}

const char *xf_driver_name(int driver) {
  return driver >= 0 && driver < (int)(sizeof driver_names / sizeof *driver_names)
             ? driver_names[driver]
             : "?";
}

void xf__emit_flow(const xf__flow *f, xf_event_type type, int source, int64_t duration_us,
                   int rc) {
  xf_event ev = {.type = type,
                 .driver = f->driver,
                 .key = f->user_key,
                 .keylen = f->user_keylen,
                 .server = NULL,
                 .source = source,
                 .duration_us = duration_us,
                 .rc = rc};
  f->cfg->on_event(&ev, f->cfg->on_event_ud);
}

void xf__emit_invalidation(const xf_client *c, xf_driver driver, const char *key,
                           size_t keylen, const char *server, int rc) {
  xf_event ev = {.type = XF_EV_INVALIDATION,
                 .driver = driver,
                 .key = key,
                 .keylen = keylen,
                 .server = server,
                 .source = -1,
                 .rc = rc};
  c->on_event(&ev, c->on_event_ud);
}

void xf__emit_server(const xf_client *c, xf_event_type type, const char *server,
                     xf_driver driver) {
  if (!c->on_event)
    return;
  xf_event ev = {.type = type, .driver = driver, .server = server, .source = -1};
  c->on_event(&ev, c->on_event_ud);
}

void xf__server_up(xf_client *c, xf__breaker *b, int *was_up, const char *server) {
  if (xf__breaker_close(b))
    xf__emit_server(c, XF_EV_BREAKER_CLOSED, server, c->driver);
  if (*was_up)
    xf__emit_server(c, XF_EV_RECONNECT, server, c->driver);
  *was_up = 1;
}

void xf__server_down(xf_client *c, xf__breaker *b, int64_t now_ms, const char *why,
                     const char *server) {
  c->stats.redis_errors++;
  if (xf__breaker_trip(b, c->breaker_ms, now_ms, why))
    xf__emit_server(c, XF_EV_BREAKER_OPEN, server, c->driver);
}
