/* What the flow's tests without Redis share (test_flow.c, test_flow_kinds.c):
 * replies parsed from RESP text, and checks of the command a SEND asks for. */
#ifndef XFT_FLOW_REPLIES_H
#define XFT_FLOW_REPLIES_H

#include <criterion/criterion.h>
#include <hiredis/hiredis.h>
#include <string.h>

#include "flow.h"

/* A reply parsed from RESP text, as hiredis would hand it over. */
static inline redisReply *reply(const char *resp) {
  redisReader *rd = redisReaderCreate();
  redisReaderFeed(rd, resp, strlen(resp));
  void *r = NULL;
  cr_assert_eq(redisReaderGetReply(rd, &r), REDIS_OK);
  cr_assert_not_null(r, "incomplete RESP: %s", resp);
  redisReaderFree(rd);
  return r;
}

static inline void expect_arg(const xf__flow *f, int i, const char *want) {
  cr_assert_lt(i, f->cmd.argc);
  cr_expect_eq(f->cmd.lens[i], strlen(want), "arg %d", i);
  cr_expect_eq(memcmp(f->cmd.argv[i], want, strlen(want)), 0, "arg %d is not %s", i, want);
}

#endif
