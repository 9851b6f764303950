/* hit_cost's memory half (issue 19): bytes per entry, plain SET vs SET PX vs
 * xf_set, from INFO memory, for 16 B, 100 B, 1 KiB and 100 KiB values
 * (--quick: 100 B and 100 KiB). The goal compares xf_set with SET PX of the
 * same TTL (a cache entry expires; the TTL's own cost is not ours to save):
 * what is left is the header's own cost; plain SET is given for context. See
 * bench/hit_cost.c and bench/README.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "goals.h"
#include "hit_cost.h"

typedef struct mem_size {
  size_t len;
  const char *label;
  int entries, quick_entries; /* quick_entries 0: not in --quick */
} mem_size;

static const mem_size MEM_SIZES[] = {{16, "16B", 20000, 0},
                                     {100, "100B", 20000, 2000},
                                     {1024, "1KiB", 20000, 0},
                                     {100 << 10, "100KiB", 500, 50}};

static double used_memory(redisContext *c) {
  redisReply *r = hc_cmd(c, "INFO memory");
  double used = -1;
  if (r && r->type == REDIS_REPLY_STRING) {
    const char *u = strstr(r->str, "\nused_memory:"),
               *cl = strstr(r->str, "mem_clients_normal:");
    if (u && cl)
      used = atof(u + strlen("\nused_memory:")) - atof(cl + strlen("mem_clients_normal:"));
  }
  if (used < 0)
    step_failed_redis("memory: INFO memory", c, r);
  if (r)
    freeReplyObject(r);
  return used;
}

/* A throwaway server is flushed; on the user's server (--redis) only this
 * pass's keys are deleted (its other keys stay, so the figures are rougher). */
static int clear(hc *h, const char *prefix, int n) {
  if (h->e->t->pid) {
    hc_cmd_free(h->ctl, "FLUSHDB SYNC");
  } else {
    for (int i = 0; i < n; i++)
      redisAppendCommand(h->ctl, "DEL %s%06d", prefix, i);
    for (int i = 0; i < n; i++) {
      redisReply *r = NULL;
      if (redisGetReply(h->ctl, (void **)&r) != REDIS_OK)
        return step_failed_redis("memory: DEL", h->ctl, NULL);
      freeReplyObject(r);
    }
  }
  return 0;
}

/* Lets the server's cron catch up before used_memory is read: it finishes
 * resizing the key tables (during an incremental rehash both tables are
 * allocated, a few bytes per entry off; one tick, hz 10, rehashes far more
 * buckets than 20,000 entries need), and it is what updates the client
 * memory that mem_clients_normal reports, which otherwise lags behind a
 * client buffer that grew or shrank (tens of bytes per entry at 2,000). */
static void settle(void) { sleep_us(150000); }

/* way 0: SET, 1: SET PX, 2: xf_set. Bytes per entry, or < 0. */
static double mem_way(hc *h, int way, const char *val, size_t len, int n) {
  char prefix[48];
  snprintf(prefix, sizeof prefix, "xfb:%x:hcm:%c:", h->e->cfg->run_id, "spx"[way]);
  if (clear(h, prefix, n) != 0)
    return -1;
  settle();
  double m0 = used_memory(h->ctl);
  size_t per_pipe = len > (4u << 20) / 1000 ? (4u << 20) / len + 1 : 1000;
  for (int base = 0; way < 2 && base < n; base += (int)per_pipe) {
    int k = n - base < (int)per_pipe ? n - base : (int)per_pipe;
    for (int i = base; i < base + k; i++)
      redisAppendCommand(h->ctl, way ? "SET %s%06d %b PX 3600000" : "SET %s%06d %b", prefix,
                         i, val, len);
    for (int i = 0; i < k; i++) {
      redisReply *r = NULL;
      if (redisGetReply(h->ctl, (void **)&r) != REDIS_OK)
        return step_failed_redis(way ? "memory: SET PX" : "memory: SET", h->ctl, NULL);
      /* an entry missing would make the bytes per entry wrong */
      int bad = r->type != REDIS_REPLY_STATUS;
      if (bad)
        step_meaningless(way ? "memory: SET PX" : "memory: SET", "bytes per entry",
                         "a write was refused, so the number of entries is not known",
                         NULL);
      freeReplyObject(r);
      if (bad)
        return -1;
    }
  }
  for (int i = 0; way == 2 && i < n; i++) {
    char key[64];
    int kl = snprintf(key, sizeof key, "%s%06d", prefix, i);
    int rc = xf_set(h->x, key, (size_t)kl, val, len, &h->p);
    if (rc != XF_OK) { /* it may or may not have landed */
      step_failed("memory: xf_set", rc, xf_errmsg(h->x));
      return step_meaningless("memory: xf_set", "bytes per entry",
                              "a write failed, so the number of entries is not known",
                              NULL);
    }
  }
  settle();
  double m1 = used_memory(h->ctl);
  if (clear(h, prefix, n) != 0 || m0 < 0 || m1 < 0)
    return -1;
  return (m1 - m0) / n;
}

int hc_memory_pass(hc *h, scenario_out *out, int q) {
  printf("\nhit_cost: Redis memory per entry (used_memory less client buffers, over N "
         "entries%s)\n",
         h->e->t->pid ? " on a flushed db" : "; --redis: not flushed");
  printf("%-8s %8s %10s %10s %10s %8s %8s\n", "value", "entries", "SET B", "SET PX B",
         "xf_set B", "xf/SET", "xf/PX");
  size_t at = strlen(out->params);
  at += (size_t)snprintf(out->params + at, sizeof out->params - at,
                         "\"flushed\": %s, \"memory\": [", h->e->t->pid ? "true" : "false");
  int first = 1;
  for (size_t s = 0; s < sizeof MEM_SIZES / sizeof MEM_SIZES[0]; s++) {
    const mem_size *z = &MEM_SIZES[s];
    int n = q ? z->quick_entries : z->entries;
    if (n == 0)
      continue;
    char *val = malloc(z->len);
    if (!val)
      return step_failed("memory", XF_ENOMEM, NULL);
    memset(val, 'x', z->len);
    double b[3];
    for (int w = 0; w < 3; w++)
      if ((b[w] = mem_way(h, w, val, z->len, n)) < 0) {
        free(val);
        return step_failed_because(z->label, "this size's bytes per entry are not measured "
                                             "(the step above)");
      }
    free(val);
    char id[32];
    snprintf(id, sizeof id, "memory_%s", z->label);
    goal_set(id,
             b[2] / b[1]); /* against SET PX: an entry expires, a TTL costs what it costs */
    printf("%-8s %8d %10.0f %10.0f %10.0f %7.2fx %7.2fx\n", z->label, n, b[0], b[1], b[2],
           b[2] / b[0], b[2] / b[1]);
    at += (size_t)snprintf(
        out->params + at, sizeof out->params - at,
        "%s{\"value_bytes\": %zu, \"entries\": %d, \"set_bytes\": %.1f, "
        "\"set_px_bytes\": %.1f, \"xfetch_bytes\": %.1f, \"ratio\": %.3g, "
        "\"ratio_set_px\": %.3g}",
        first ? "" : ", ", z->len, n, b[0], b[1], b[2], b[2] / b[0], b[2] / b[1]);
    first = 0;
  }
  snprintf(out->params + at, sizeof out->params - at, "]}");
  return 0;
}
