/* The async scenario's event-loop side: one libuv loop thread keeps n hit
 * requests in flight through xf_async (each answer starts the next) for a
 * fixed time. Built only when libuv was found (XF_BENCH_LIBUV). */
#include <stdio.h>
#include <stdlib.h>

#include "drivers.h"

void drv_record(drv_run *r, uint32_t us) {
  if (r->nus == r->cap) {
    size_t cap = r->cap ? r->cap * 2 : 65536;
    uint32_t *v = realloc(r->us, cap * sizeof *v);
    if (!v)
      return;
    r->us = v, r->cap = cap;
  }
  r->us[r->nus++] = us;
}

#ifndef XF_BENCH_LIBUV
int drv_async_loop(const target *t, const drv_keyset *k, const xf_policy *p, int n,
                   double dur_s, drv_run *out) {
  (void)t, (void)k, (void)p, (void)n, (void)dur_s, (void)out;
  return 1;
}
#else
#include <xfetch_libuv.h>

typedef struct loop_run {
  xf_async *ac;
  const drv_keyset *k;
  const xf_policy *p;
  int64_t end_us;
  int in_flight, closed;
  size_t next_key;
  drv_run *out;
} loop_run;

typedef struct slot {
  loop_run *run;
  int64_t t0;
} slot;

static void async_loader(void *ud, const char *key, size_t keylen, xf_async_load *load) {
  (void)ud, (void)key, (void)keylen;
  static const char v[] =
      "a value of sixty-four bytes, as hit_overhead uses: 0123456789abc";
  xf_async_load_done(load, v, sizeof v - 1);
}

static void answered(int rc, const xf_value *v, void *privdata);

static void issue(slot *s) {
  loop_run *r = s->run;
  size_t i = r->next_key++ % r->k->n;
  s->t0 = now_us();
  int rc = xf_async_get_or_compute(r->ac, r->k->ptr[i], r->k->len[i], r->p, async_loader,
                                   NULL, answered, s);
  if (rc != XF_OK) { /* this slot stops: counted */
    step_count(&r->out->errs, "xf_async_get_or_compute (start)", rc,
               xf_async_errmsg(r->ac));
    r->in_flight--;
  }
}

static void answered(int rc, const xf_value *v, void *privdata) {
  slot *s = privdata;
  loop_run *r = s->run;
  int64_t now = now_us();
  r->out->requests++;
  drv_count_bad_hit(&r->out->errs, "xf_async_get_or_compute", rc, v,
                    xf_async_errmsg(r->ac));
  drv_record(r->out, (uint32_t)(now - s->t0));
  if (now < r->end_us && !r->closed)
    issue(s);
  else if (--r->in_flight == 0 && !r->closed) {
    r->closed = 1;
    xf_async_close(r->ac);
  }
}

int drv_async_loop(const target *t, const drv_keyset *k, const xf_policy *p, int n,
                   double dur_s, drv_run *out) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  xf_options o = target_options(t);
  loop_run r = {.k = k, .p = p, .out = out};
  int rc = xf_async_open_libuv(&r.ac, &o, &loop);
  slot *slots = calloc((size_t)n, sizeof *slots);
  if (rc != XF_OK || !slots) {
    step_failed("xf_async_open_libuv", rc != XF_OK ? rc : XF_ENOMEM,
                rc != XF_OK && r.ac ? xf_async_errmsg(r.ac) : NULL);
    free(slots);
    if (rc == XF_OK)
      xf_async_close(r.ac);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    return -1;
  }
  int64_t t0 = now_us();
  r.end_us = t0 + (int64_t)(dur_s * 1e6);
  r.in_flight = n;
  for (int i = 0; i < n; i++) {
    slots[i].run = &r;
    issue(&slots[i]);
  }
  if (r.in_flight == 0 && !r.closed) {
    r.closed = 1;
    xf_async_close(r.ac);
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  out->seconds = (double)(now_us() - t0) / 1e6;
  uv_loop_close(&loop);
  free(slots);
  return 0;
}
#endif
