/* The caching policy of a call: validation and the times derived from it. */
#include <math.h>
#include <stdint.h>

#include "flow_env.h"
#include "policy.h"

static int check_time(xf__runtime *rt, const char *name, int64_t v, int64_t min) {
  if (v < min || v > XF_MAX_TIME_MS)
    return xf__rt_fail(rt, XF_EINVAL, "policy %s is %lld, must be in [%lld, 2^40]", name,
                       (long long)v, (long long)min);
  return XF_OK;
}

/* Whether v is outside [min, XF_MAX_TIME_MS]: one unsigned compare. */
static inline int time_out(int64_t v, int64_t min) {
  return (uint64_t)v - (uint64_t)min > (uint64_t)(XF_MAX_TIME_MS - min);
}

/* Whether p passes every check below, each field judged without a branch
 * or a message: a call checks its policy every time, and a valid one costs
 * this only. */
static inline int policy_valid(const xf_policy *p) {
  int bad = !(p->beta >= 0) | !(p->jitter >= 0) | !(p->jitter < 1) |
            !isfinite(p->refresh_ahead) |
            (p->on_wait_timeout != XF_WAIT_LOAD && p->on_wait_timeout != XF_WAIT_FAIL) |
            ((unsigned)p->background_refresh - XF_BACKGROUND_AUTO >
             (unsigned)(XF_BACKGROUND_OFF - XF_BACKGROUND_AUTO)) |
            (!p->loader_ud_keep != !p->loader_ud_drop) | time_out(p->ttl_ms, 1) |
            time_out(p->lease_ms, 1) | time_out(p->wait_ms, 0) | time_out(p->stale_ms, 0) |
            time_out(p->stale_if_error_ms, 0) | time_out(p->negative_ttl_ms, 0) |
            time_out(p->max_load_ms, 0) | time_out(p->soft_timeout_ms, 0) |
            time_out(p->hard_timeout_ms, 0) | time_out(p->failsafe_throttle_ms, 0) |
            (p->soft_timeout_ms > 0 && p->hard_timeout_ms > 0 &&
             p->soft_timeout_ms > p->hard_timeout_ms);
  return !bad;
}

int xf__policy_check(xf__runtime *rt, const xf_policy *p) {
  if (!p)
    return xf__rt_fail(rt, XF_EINVAL, "policy is NULL");
  if (policy_valid(p))
    return XF_OK;
  /* Invalid: find the first check it fails, for its message. */
  if (isnan(p->beta) || p->beta < 0)
    return xf__rt_fail(rt, XF_EINVAL,
                       "policy beta must be >= 0 (INFINITY allowed), not NaN");
  if (isnan(p->jitter) || p->jitter < 0 || p->jitter >= 1)
    return xf__rt_fail(rt, XF_EINVAL, "policy jitter must be in [0, 1)");
  if (isnan(p->refresh_ahead) || isinf(p->refresh_ahead))
    return xf__rt_fail(rt, XF_EINVAL, "policy refresh_ahead must be a finite number");
  if (p->on_wait_timeout != XF_WAIT_LOAD && p->on_wait_timeout != XF_WAIT_FAIL)
    return xf__rt_fail(rt, XF_EINVAL,
                       "policy on_wait_timeout is not an xf_on_wait_timeout");
  if (p->background_refresh < XF_BACKGROUND_AUTO ||
      p->background_refresh > XF_BACKGROUND_OFF)
    return xf__rt_fail(rt, XF_EINVAL, "policy background_refresh is not an xf_background");
  if (!p->loader_ud_keep != !p->loader_ud_drop)
    return xf__rt_fail(rt, XF_EINVAL, "policy loader_ud_%s is NULL: give both or neither",
                       p->loader_ud_keep ? "drop" : "keep");
  int rc = check_time(rt, "ttl_ms", p->ttl_ms, 1);
  if (rc == XF_OK)
    rc = check_time(rt, "lease_ms", p->lease_ms, 1);
  if (rc == XF_OK)
    rc = check_time(rt, "wait_ms", p->wait_ms, 0);
  if (rc == XF_OK)
    rc = check_time(rt, "stale_ms", p->stale_ms, 0);
  if (rc == XF_OK)
    rc = check_time(rt, "stale_if_error_ms", p->stale_if_error_ms, 0);
  if (rc == XF_OK)
    rc = check_time(rt, "negative_ttl_ms", p->negative_ttl_ms, 0);
  if (rc == XF_OK)
    rc = check_time(rt, "max_load_ms", p->max_load_ms, 0);
  if (rc == XF_OK)
    rc = check_time(rt, "soft_timeout_ms", p->soft_timeout_ms, 0);
  if (rc == XF_OK)
    rc = check_time(rt, "hard_timeout_ms", p->hard_timeout_ms, 0);
  if (rc == XF_OK)
    rc = check_time(rt, "failsafe_throttle_ms", p->failsafe_throttle_ms, 0);
  if (rc == XF_OK && p->soft_timeout_ms > 0 && p->hard_timeout_ms > 0 &&
      p->soft_timeout_ms > p->hard_timeout_ms)
    rc = xf__rt_fail(rt, XF_EINVAL,
                     "policy soft_timeout_ms (%lld) is past hard_timeout_ms (%lld)",
                     (long long)p->soft_timeout_ms, (long long)p->hard_timeout_ms);
  return rc;
}

int64_t xf__policy_ttl(xf__runtime *rt, const xf_policy *p) {
  if (p->jitter <= 0)
    return p->ttl_ms;
  int64_t cut = (int64_t)((double)p->ttl_ms * p->jitter * xf__pcg32_unit(&rt->rng));
  return p->ttl_ms - cut > 0 ? p->ttl_ms - cut : 1;
}

int64_t xf__policy_keep_ms(const xf_policy *p) {
  return p->stale_ms > p->stale_if_error_ms ? p->stale_ms : p->stale_if_error_ms;
}

int64_t xf__policy_max_load_ms(const xf_policy *p) {
  return p->max_load_ms > 0 ? p->max_load_ms : XF_MAX_LOAD_DEFAULT_MS;
}

int xf__policy_background(const xf_policy *p, xf__off_path driver) {
  if (driver == XF__OFF_PATH_NONE)
    return 0;
  if (p->background_refresh == XF_BACKGROUND_ON)
    return 1;
  return p->background_refresh == XF_BACKGROUND_AUTO && driver == XF__OFF_PATH_READY &&
         p->loader_ud_keep;
}

int xf__policy_keep_ud(const xf_policy *p, void *ud, void **kept) {
  *kept = ud;
  if (!p->loader_ud_keep)
    return 1;
  *kept = p->loader_ud_keep(ud);
  return *kept || !ud;
}

void xf__policy_drop_ud(const xf_policy *p, void *kept) {
  if (p->loader_ud_drop)
    p->loader_ud_drop(kept);
}
