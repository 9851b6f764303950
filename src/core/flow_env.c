/* A flow's configuration and runtime without a client (flow_env.h), and the
 * runtime's message. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "flow_env.h"

void xf__config_init(xf__config *cfg) {
  static char none[] = "";
  memset(cfg, 0, sizeof *cfg);
  cfg->prefix = cfg->ns = none;
  cfg->max_key_len = 65536; /* xf_options' defaults */
  cfg->max_value_len = 64u * 1024 * 1024;
  cfg->id = 1;
  cfg->entry_format = XF_ENTRY_STRING;
  cfg->tombstone_ms = 60000;
  cfg->tag_wait_ms = 500; /* half xf_options' command timeout */
  cfg->wake_poll_ms = XF__WAKE_POLL_MS;
}

void xf__runtime_init(xf__runtime *rt, uint64_t seed) {
  memset(rt, 0, sizeof *rt);
  xf__pcg32_seed(&rt->rng, seed, 0);
  rt->driver = XF_DRIVER_BLOCKING;
}

int xf__rt_fail(xf__runtime *rt, int rc, const char *fmt, ...) {
  if (rt) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rt->errstr, sizeof rt->errstr, fmt, ap);
    va_end(ap);
  }
  return rc;
}
