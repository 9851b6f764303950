/* Criterion helpers for the cluster tests (cluster_launch.c starts the
 * cluster, cluster_shared.c shares one per binary). */
#include <criterion/criterion.h>
#include <stdarg.h>

#include "cluster_fixture.h"

redisContext *xft_cluster_redis(int port) {
  redisContext *r = xft_cluster_connect(port);
  cr_assert_not_null(r, "raw connect to %d failed", port);
  return r;
}

redisReply *xft_cluster_cmd(redisContext *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  redisReply *rep = redisvCommand(r, fmt, ap);
  va_end(ap);
  cr_assert_not_null(rep, "command %s failed: %s", fmt, r->errstr);
  return rep;
}
