/* The five strategies, each one request at a time on its own connection, all
 * calling the same loader: sleep loader_ms, counted in the shared arena. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "client.h" /* struct xf_client: its TLS context, for the handshake count */
#include "conn.h"   /* xf__conn_command: a raw GET on the library's own connection */
#include "tls.h"
#include "xfetch.h"

#define LOCK_LEASE_MS 5000 /* same lease and wait budget as XF_POLICY_INIT */
#define LOCK_WAIT_MS 5000
#define LOCK_POLL_US 5000

struct strat_ctx {
  const target *t;
  const run_spec *spec;
  arena *a;
  redisContext *rc;
  xf_client *xc;
  xf_pool *pool;   /* xfetch_bg: a pool (one connection) and its share's workers */
  xf_share *share; /* xfetch: the worker process's share (its refresh workers) */
  xf_policy policy;
  pcg rng;
  char *value;
  char key[128], lock[140], token[48];
  size_t keylen, locklen;
  uint32_t cur_key;
  uint64_t ntoken;
  int refs; /* the worker's own, and one per refresh that uses it as loader_ud */
};

const char *strategy_name(strategy s) {
  static const char *names[] = {"raw_get",        "naive",  "lock",
                                "xfetch_nolease", "xfetch", "xfetch_bg"};
  return s < ST_COUNT ? names[s] : "?";
}

static int64_t jittered(pcg *r, const run_spec *s, int64_t ttl) {
  int64_t cut = (int64_t)((double)ttl * s->jitter * pcg_unit(r));
  return ttl - cut > 0 ? ttl - cut : 1;
}

static int claim_description(strat_ctx *c) {
  int no = 0;
  return __atomic_compare_exchange_n(&c->a->errs.described, &no, 1, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE);
}

/* The loader: a simulated expensive computation. */
static void load(strat_ctx *c, int32_t remaining_ms) {
  long slot = arena_load_begin(c->a, c->cur_key, remaining_ms);
  sleep_us((int64_t)c->spec->loader_ms * 1000);
  arena_load_end(c->a, slot);
}

/* Whether the loader ran on this thread: a request that refreshed inside
 * itself, not on a refresh worker. */
static _Thread_local int loaded_here;

/* The context as a background refresh's loader_ud: counted, freed with the
 * last reference. */
static void *ctx_keep(void *ud) {
  __atomic_add_fetch(&((strat_ctx *)ud)->refs, 1, __ATOMIC_ACQ_REL);
  return ud;
}

static void ctx_drop(void *ud) {
  strat_ctx *c = ud;
  if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) > 0)
    return;
  free(c->value);
  free(c);
}

static int lib_loader(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)key, (void)keylen;
  strat_ctx *c = ud;
  loaded_here = 1;
  load(c, INT32_MIN);
  return xf_sink_set(sink, c->value, (size_t)c->spec->value_len) == XF_OK ? 0 : -1;
}

/* (Re)opens the hiredis connection of a raw strategy; a failure is described
 * in the arena (the caller counts it). 0 or -1. */
static int reconnect(strat_ctx *c) {
  if (c->rc)
    redisFree(c->rc);
  char why[400];
  c->rc = target_open(c->t, 5000, why, sizeof why);
  if (!c->rc) {
    if (claim_description(c))
      snprintf(c->a->errs.first, sizeof c->a->errs.first, "%s: %.280s",
               strategy_name(c->spec->strat), why);
    return -1;
  }
  if (c->spec->strat == ST_XFETCH_NOLEASE && pure_load_scripts(c->rc) != 0) {
    step_describe_redis(&c->a->errs, "SCRIPT LOAD", c->rc, NULL);
    return -1;
  }
  return 0;
}

strat_ctx *strat_open(const target *t, const run_spec *spec, arena *a, int worker) {
  strat_ctx *c = calloc(1, sizeof *c);
  if (c)
    c->refs = 1;
  if (!c) {
    step_count(&a->errs, "a worker's setup", XF_ENOMEM, NULL);
    return NULL;
  }
  c->t = t;
  c->spec = spec;
  c->a = a;
  c->value = malloc((size_t)spec->value_len + 1);
  memset(c->value, 'x', (size_t)spec->value_len);
  pcg_seed(&c->rng, (uint64_t)now_us() ^ ((uint64_t)getpid() << 32), (uint64_t)worker);
  /* raw_get over TLS: hiredis 0.14 has no TLS, so the GET travels on an
   * xf_client's own connection (get_on_client) */
  int raw_tls = spec->strat == ST_RAW_GET && t->tls_ca[0];
  if (spec->strat == ST_XFETCH || spec->strat == ST_XFETCH_BG || raw_tls) {
    xf_options o = target_options(t);
    /* xfetch: a client as a process opens it, with the process's share, and
     * the default policy with the loader_ud's lifetime (a reference per
     * refresh): the rate-aware rule, early refreshes on the share's workers. */
    if (spec->strat == ST_XFETCH && xf_share_open(&c->share, NULL) != XF_OK) {
      step_count(&a->errs, "a worker's xf_share_open", XF_ENOMEM, NULL);
      strat_close(c);
      return NULL;
    }
    o.share = c->share;
    int rc = spec->strat != ST_XFETCH_BG ? xf_client_open(&c->xc, &o)
                                         : xf_pool_open(&c->pool, &o, 1, 0);
    if (rc != XF_OK) {
      step_count(&a->errs,
                 spec->strat != ST_XFETCH_BG ? "a worker's xf_client_open"
                                             : "a worker's xf_pool_open",
                 rc, spec->strat != ST_XFETCH_BG ? xf_errmsg(c->xc) : xf_pool_errmsg());
      strat_close(c);
      return NULL;
    }
    xf_policy p = XF_POLICY_INIT;
    p.ttl_ms = spec->ttl_ms;
    p.beta = spec->beta;
    p.jitter = spec->jitter;
    if (spec->strat == ST_XFETCH_BG)
      p.background_refresh = XF_BACKGROUND_ON;
    else
      p.loader_ud_keep = ctx_keep, p.loader_ud_drop = ctx_drop;
    c->policy = p;
    return c;
  }
  if (reconnect(c) != 0) {
    __atomic_add_fetch(&a->errs.n, 1, __ATOMIC_RELAXED);
    strat_close(c);
    return NULL;
  }
  return c;
}

void strat_close(strat_ctx *c) {
  if (!c)
    return;
  if (c->xc && c->xc->tls) /* one per connection it made, for the tls scenario */
    __atomic_add_fetch(&c->a->handshakes, xf__tls_handshakes(c->xc->tls), __ATOMIC_RELAXED);
  xf_client_close(c->xc);
  xf_share_close(c->share);
  xf_pool_close(c->pool);
  if (c->rc)
    redisFree(c->rc);
  ctx_drop(c); /* a refresh left running past the share's close holds its own */
}

/* GET key: 1 hit, 0 miss, -1 error. */
static int get(strat_ctx *c) {
  redisReply *r = redisCommand(c->rc, "GET %b", c->key, c->keylen);
  int rc = !r                              ? -1
           : r->type == REDIS_REPLY_STRING ? 1
           : r->type == REDIS_REPLY_NIL    ? 0
                                           : -1;
  if (rc < 0 || (rc == 0 && c->spec->strat == ST_RAW_GET)) /* raw_get's key never expires */
    step_describe_redis(&c->a->errs, "GET", c->rc, r);
  if (r)
    freeReplyObject(r);
  return rc;
}

/* GET key on the xf_client's connection (the library's stream, plain or
 * TLS, and its reply reader: the connection an xfetch hit uses, without the
 * cache layer): 1 hit, 0 miss, -1 error. */
static int get_on_client(strat_ctx *c) {
  xf__cmd cmd;
  xf__cmd_begin(&cmd, c->key, c->keylen);
  cmd.argc = 2;
  cmd.argv[0] = "GET", cmd.lens[0] = 3;
  cmd.argv[1] = c->key, cmd.lens[1] = c->keylen;
  xf__reply *r = NULL;
  int rc = xf__conn_command(c->xc, &c->xc->seeds[0], &cmd, 0, &r);
  int got = rc != XF_OK                  ? -1
            : r->type == XF_REPLY_STRING ? 1
            : r->type == XF_REPLY_NIL    ? 0
                                         : -1;
  if (got < 0)
    step_describe(&c->a->errs, "GET (on the library's connection)",
                  rc != XF_OK ? rc : XF_EPROTO, xf_errmsg(c->xc));
  xf__reply_free(r);
  return got;
}

static int set_value(strat_ctx *c) {
  long long ttl = jittered(&c->rng, c->spec, c->spec->ttl_ms);
  redisReply *r = redisCommand(c->rc, "SET %b %b PX %lld", c->key, c->keylen, c->value,
                               (size_t)c->spec->value_len, ttl);
  int ok = r && r->type == REDIS_REPLY_STATUS;
  if (!ok)
    step_describe_redis(&c->a->errs, "SET PX", c->rc, r);
  if (r)
    freeReplyObject(r);
  return ok ? 0 : -1;
}

static int naive(strat_ctx *c, unsigned *flags) {
  int hit = get(c);
  if (hit != 0)
    return hit > 0 ? 0 : -1;
  load(c, INT32_MIN);
  *flags |= RQ_LOADED;
  return set_value(c);
}

/* 1 when this caller took the lock. */
static int try_lock(strat_ctx *c) {
  snprintf(c->token, sizeof c->token, "%d-%llu", (int)getpid(),
           (unsigned long long)++c->ntoken);
  redisReply *r = redisCommand(c->rc, "SET %b %s NX PX %d", c->lock, c->locklen, c->token,
                               LOCK_LEASE_MS);
  int won = r && r->type == REDIS_REPLY_STATUS;
  if (r)
    freeReplyObject(r);
  return won;
}

static void unlock(strat_ctx *c) {
  redisReply *r = redisCommand(
      c->rc, "EVAL %s 1 %b %s",
      "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end "
      "return 0",
      c->lock, c->locklen, c->token);
  if (r)
    freeReplyObject(r);
}

static int lock(strat_ctx *c, unsigned *flags) {
  int hit = get(c);
  if (hit != 0)
    return hit > 0 ? 0 : -1;
  int64_t give_up = now_us() + LOCK_WAIT_MS * 1000LL;
  c->locklen = (size_t)snprintf(c->lock, sizeof c->lock, "lock:%s", c->key);
  for (;;) {
    if (try_lock(c)) {
      if ((hit = get(c)) != 0) { /* written while we took the lock: no load */
        unlock(c);
        return hit > 0 ? 0 : -1;
      }
      load(c, INT32_MIN);
      *flags |= RQ_LOADED;
      int rc = set_value(c);
      unlock(c);
      return rc;
    }
    if (now_us() > give_up) { /* the lock holder is too slow: load anyway */
      load(c, INT32_MIN);
      *flags |= RQ_LOADED;
      return set_value(c);
    }
    *flags |= RQ_WAITED;
    sleep_us(LOCK_POLL_US);
    if ((hit = get(c)) != 0)
      return hit > 0 ? 0 : -1;
  }
}

static int nolease(strat_ctx *c, unsigned *flags) {
  pure_read e;
  if (pure_read_entry(c->rc, c->key, c->keylen, &e) != 0)
    return -1;
  if (!pure_decide(&c->rng, c->spec->beta, &e))
    return 0;
  int64_t t0 = now_us();
  load(c, e.present ? (int32_t)e.remaining_ms : INT32_MIN);
  *flags |= RQ_LOADED;
  return pure_write_entry(c->rc, c->key, c->keylen, c->value, (size_t)c->spec->value_len,
                          now_us() - t0, jittered(&c->rng, c->spec, c->spec->ttl_ms));
}

/* The library: RQ_LOADED only when the loader ran in this request (a miss,
 * or an early refresh run in the call), not for a refresh handed to the
 * share's workers (which stats.loads counts too). */
static int library(strat_ctx *c, unsigned *flags) {
  xf_stats before, after;
  xf_client_stats(c->xc, &before);
  xf_value v;
  loaded_here = 0;
  int rc = xf_get_or_compute(c->xc, c->key, c->keylen, &c->policy, lib_loader, c, &v);
  xf_client_stats(c->xc, &after);
  if (loaded_here)
    *flags |= RQ_LOADED;
  if (after.waits > before.waits)
    *flags |= RQ_WAITED;
  if (rc == XF_OK && v.source == XF_SOURCE_STALE)
    *flags |= RQ_STALE;
  if (rc == XF_OK && v.source == XF_SOURCE_UNCACHED)
    step_describe(&c->a->errs, "xf_get_or_compute served uncached (fail-open)", rc = XF_EIO,
                  xf_errmsg(c->xc)); /* Redis failed: an error */
  else if (rc != XF_OK)
    step_describe(&c->a->errs, "xf_get_or_compute", rc, xf_errmsg(c->xc));
  xf_value_free(&v);
  return rc == XF_OK ? 0 : -1;
}

/* The pool with background refresh: RQ_LOADED only when the loader ran in
 * this request (a miss, or a refresh the workers could not take). */
static int library_bg(strat_ctx *c, unsigned *flags) {
  xf_pool_info before, after;
  xf_pool_stats(c->pool, &before);
  xf_value v;
  loaded_here = 0;
  int rc =
      xf_pool_get_or_compute(c->pool, c->key, c->keylen, &c->policy, lib_loader, c, &v);
  xf_pool_stats(c->pool, &after);
  if (loaded_here)
    *flags |= RQ_LOADED;
  if (after.clients.waits > before.clients.waits)
    *flags |= RQ_WAITED;
  if (rc == XF_OK && v.source == XF_SOURCE_STALE)
    *flags |= RQ_STALE;
  if (rc == XF_OK && v.source == XF_SOURCE_UNCACHED)
    step_describe(&c->a->errs, "xf_pool_get_or_compute served uncached (fail-open)",
                  rc = XF_EIO, xf_pool_errmsg());
  else if (rc != XF_OK)
    step_describe(&c->a->errs, "xf_pool_get_or_compute", rc, xf_pool_errmsg());
  xf_value_free(&v);
  return rc == XF_OK ? 0 : -1;
}

static int request(strat_ctx *c, unsigned *flags) {
  switch (c->spec->strat) {
  case ST_RAW_GET:
    return (c->xc ? get_on_client(c) : get(c)) > 0 ? 0 : -1;
  case ST_NAIVE:
    return naive(c, flags);
  case ST_LOCK:
    return lock(c, flags);
  case ST_XFETCH_NOLEASE:
    return nolease(c, flags);
  case ST_XFETCH:
    return library(c, flags);
  case ST_XFETCH_BG:
    return library_bg(c, flags);
  default:
    return -1;
  }
}

int strat_get(strat_ctx *c, uint32_t key, unsigned *flags) {
  c->cur_key = key;
  c->keylen = (size_t)snprintf(c->key, sizeof c->key, "%s%u", c->spec->prefix, key);
  *flags = 0;
  int raw = !c->xc && !c->pool;
  if (raw && (!c->rc || c->rc->err) && reconnect(c) != 0)
    return -1; /* described by reconnect */
  int rc = request(c, flags);
  if (rc != 0 && raw) /* whatever the step, the connection says why */
    step_describe_redis(&c->a->errs, strategy_name(c->spec->strat), c->rc, NULL);
  return rc;
}

static void append_prefill(redisContext *rc, const run_spec *s, pcg *r, const char *key,
                           size_t keylen, const char *v, int64_t ttl_ms) {
  int64_t ttl = jittered(r, s, ttl_ms);
  if (s->strat == ST_RAW_GET)
    redisAppendCommand(rc, "SET %b %b", key, keylen, v, (size_t)s->value_len);
  else if (s->strat == ST_NAIVE || s->strat == ST_LOCK)
    redisAppendCommand(rc, "SET %b %b PX %lld", key, keylen, v, (size_t)s->value_len,
                       (long long)ttl);
  else /* both XFetch strategies: an entry as if just computed by the loader */
    pure_append_write(rc, key, keylen, v, (size_t)s->value_len, s->loader_ms * 1000LL, ttl,
                      s->strat == ST_XFETCH ? s->entry_format : 1);
}

int strat_prefill(redisContext *rc, const run_spec *s, int first, int count, int64_t ttl_ms,
                  const char *step) {
  if ((s->strat == ST_XFETCH || s->strat == ST_XFETCH_BG ||
       s->strat == ST_XFETCH_NOLEASE) &&
      pure_load_scripts(rc))
    return step_failed_redis(step, rc, NULL);
  char *v = malloc((size_t)s->value_len + 1);
  memset(v, 'x', (size_t)s->value_len);
  pcg r;
  pcg_seed(&r, (uint64_t)now_us(), 7);
  int bad = 0;
  for (int base = 0; base < count; base += 1000) {
    int n = count - base < 1000 ? count - base : 1000;
    for (int i = 0; i < n; i++) {
      char key[128];
      size_t kl = (size_t)snprintf(key, sizeof key, "%s%d", s->prefix, first + base + i);
      append_prefill(rc, s, &r, key, kl, v, ttl_ms);
    }
    for (int i = 0; i < n; i++) {
      redisReply *reply = NULL;
      if (redisGetReply(rc, (void **)&reply) != REDIS_OK) {
        free(v);
        return step_failed_redis(step, rc, NULL);
      }
      if (reply->type == REDIS_REPLY_ERROR && !bad++)
        step_failed_redis(step, rc, reply);
      freeReplyObject(reply);
    }
  }
  free(v);
  return bad ? -1 : 0;
}
