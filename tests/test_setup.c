/* The connection setup (setup.c): the list built from the options and the
 * role, and the judgement of replies. */
#include <criterion/criterion.h>
#include <string.h>

#include "client.h"
#include "fixture.h"
#include "setup.h"

static xf_client *configured(const char *user, const char *pass, int db) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = xft_port();
  o.username = user;
  o.password = pass;
  o.db = db;
  o.lazy_connect = 1;
  o.cluster = XF_CLUSTER_OFF;
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  return c;
}

static redisReply *parsed(const char *resp) {
  redisReader *rd = redisReaderCreate();
  void *r = NULL;
  redisReaderFeed(rd, resp, strlen(resp));
  cr_assert_eq(redisReaderGetReply(rd, &r), REDIS_OK);
  redisReaderFree(rd);
  cr_assert_not_null(r);
  return r;
}

Test(setup, the_list_follows_the_options_and_the_role) {
  xf_client *c = configured("xfuser", "pw", 3);
  xf__setup s;
  xf__setup_build(c, XF_SETUP_REPLICA | XF_SETUP_SCRIPTS, &s);
  cr_assert_eq(s.n, 3 + 5, "AUTH, SELECT, READONLY, read..delete");
  cr_expect_eq(s.kind[0], XF__SETUP_AUTH);
  cr_expect_eq(s.cmd[0].argc, 3);
  cr_expect_str_eq(s.cmd[0].argv[1], "xfuser");
  cr_expect_str_eq(s.cmd[0].argv[2], "pw");
  cr_expect_eq(s.kind[1], XF__SETUP_SELECT);
  cr_expect_str_eq(s.cmd[1].argv[1], "3");
  cr_expect_eq(s.cmd[1].lens[1], 1);
  cr_expect_eq(s.kind[2], XF__SETUP_READONLY);
  cr_expect_eq(s.cmd[2].argc, 1);
  for (int i = 3; i < s.n; i++) {
    cr_expect_eq(s.kind[i], XF__SETUP_SCRIPT);
    cr_expect_str_eq(s.cmd[i].argv[0], "SCRIPT");
    cr_expect_eq(s.cmd[i].lens[2], xf__scripts[XF_SCRIPT_READ + i - 3].len);
  }
  xf__setup_build(c, 0, &s);
  cr_expect_eq(s.n, 2);
  xf_client_close(c);
  c = configured(NULL, "pw", 0);
  xf__setup_build(c, 0, &s);
  cr_assert_eq(s.n, 1);
  cr_expect_str_eq(s.cmd[0].argv[1], "default", "requirepass is the default user's");
  xf_client_close(c);
  c = configured(NULL, NULL, 0);
  xf__setup_build(c, 0, &s);
  cr_expect_eq(s.n, 0, "nothing to set up");
  xf_client_close(c);
}

Test(setup, replies_are_judged_auth_is_eauth_busy_and_loading_unavailable) {
  static const struct {
    xf__setup_kind kind;
    const char *resp;
    int rc;
  } cases[] = {
      {XF__SETUP_AUTH, "+OK\r\n", XF_OK},
      {XF__SETUP_AUTH, "-WRONGPASS invalid username-password pair or user is disabled.\r\n",
       XF_EAUTH},
      {XF__SETUP_AUTH, "-ERR invalid password\r\n", XF_EAUTH},
      {XF__SETUP_AUTH,
       "-ERR AUTH <password> called without any password configured for the default "
       "user. Are you sure your configuration is correct?\r\n",
       XF_EAUTH},
      {XF__SETUP_AUTH, "-LOADING Redis is loading the dataset in memory\r\n",
       XF_EUNAVAILABLE},
      {XF__SETUP_SELECT, "+OK\r\n", XF_OK},
      {XF__SETUP_SELECT, "-NOAUTH Authentication required.\r\n", XF_EAUTH},
      {XF__SETUP_SELECT, "-ERR DB index is out of range\r\n", XF_EAUTH},
      {XF__SETUP_SELECT,
       "-NOPERM this user has no permissions to run the 'select' command\r\n", XF_EAUTH},
      {XF__SETUP_SELECT, "-ERR SELECT is not allowed in cluster mode\r\n", XF_EINVAL},
      {XF__SETUP_SELECT, "-BUSY Redis is busy running a script.\r\n", XF_EUNAVAILABLE},
      {XF__SETUP_SELECT, "-LOADING Redis is loading the dataset in memory\r\n",
       XF_EUNAVAILABLE},
      {XF__SETUP_READONLY, "+OK\r\n", XF_OK},
      {XF__SETUP_READONLY, "-ERR This instance has cluster support disabled\r\n",
       XF_EREDIS},
      {XF__SETUP_READONLY, "-NOAUTH Authentication required.\r\n", XF_EAUTH},
      {XF__SETUP_READONLY, "-LOADING Redis is loading the dataset in memory\r\n",
       XF_EUNAVAILABLE},
      {XF__SETUP_SCRIPT, "$40\r\n0123456789012345678901234567890123456789\r\n", XF_OK},
      {XF__SETUP_SCRIPT, "-LOADING Redis is loading the dataset in memory\r\n", XF_OK},
      {XF__SETUP_SCRIPT, "-NOAUTH Authentication required.\r\n", XF_OK},
  };
  xf_client *c = configured(NULL, NULL, 5);
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    redisReply *r = parsed(cases[i].resp);
    c->errstr[0] = '\0';
    int rc = xf__setup_judge(c, cases[i].kind, r);
    cr_expect_eq(rc, cases[i].rc, "case %zu (%s): %s", i, cases[i].resp, xf_errname(rc));
    if (rc == XF_EINVAL)
      cr_expect(strstr(xf_errmsg(c), "db 0") && strstr(xf_errmsg(c), "5"), "%s",
                xf_errmsg(c));
    if (rc != XF_OK && rc != XF_EINVAL)
      cr_expect(strstr(xf_errmsg(c), r->str), "the reply in the message: %s", xf_errmsg(c));
    freeReplyObject(r);
  }
  redisReply *r = parsed("-WRONGPASS invalid username-password pair\r\n");
  cr_expect_eq(xf__setup_judge(c, XF__SETUP_AUTH, r), XF_EAUTH);
  cr_expect_str_eq(xf_errmsg(c), "AUTH: WRONGPASS invalid username-password pair");
  freeReplyObject(r);
  xf_client_close(c);
}
