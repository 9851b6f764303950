/* What the tests without Redis share (test_flow, test_flow_kinds, test_route,
 * test_script, test_setup): replies parsed from RESP text, and checks of the
 * command a SEND asks for. */
#ifndef XFT_FLOW_REPLIES_H
#define XFT_FLOW_REPLIES_H

#include <criterion/criterion.h>
#include <string.h>

#include "flow.h"
#include "reply.h"

/* A reply parsed from RESP text by the library's reader, as a driver hands
 * it over. */
static inline xf__reply *reply(const char *resp) {
  xf_reader *rd;
  cr_assert_eq(xf_reader_open(&rd), XF_OK);
  cr_assert_eq(xf_reader_feed(rd, resp, strlen(resp)), XF_OK);
  xf_reply *r = NULL;
  cr_assert_eq(xf_reader_next(rd, &r), XF_OK);
  cr_assert_not_null(r, "incomplete RESP: %s", resp);
  xf_reader_close(rd);
  return r;
}

static inline void expect_arg(const xf__flow *f, int i, const char *want) {
  cr_assert_lt(i, f->cmd.argc);
  cr_expect_eq(f->cmd.lens[i], strlen(want), "arg %d", i);
  cr_expect_eq(memcmp(f->cmd.argv[i], want, strlen(want)), 0, "arg %d is not %s", i, want);
}

#endif
