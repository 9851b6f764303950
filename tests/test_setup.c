/* The connection setup (setup.c): the list built from the options and the
 * role, its bytes, and the judgement of replies, scripted and from a real
 * server over a plain socket. */
#include <criterion/criterion.h>
#include <string.h>
#include <unistd.h>

#include "client.h"
#include "fixture.h"
#include "flow_replies.h"
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

Test(setup, the_list_follows_the_options_and_the_role) {
  xf_client *c = configured("xfuser", "pw", 3);
  xf__setup s;
  xf__setup_build(c, XF_SETUP_REPLICA | XF_SETUP_SCRIPTS, &s);
  cr_assert_eq(s.n, 3 + 9,
               "AUTH, SELECT, READONLY, read..delete, tag_read, tag_bump, renew, touch");
  cr_expect_eq(s.kind[0], XF__SETUP_AUTH);
  cr_expect_eq(s.cmd[0].argc, 3);
  cr_expect_str_eq(s.cmd[0].argv[1], "xfuser");
  cr_expect_str_eq(s.cmd[0].argv[2], "pw");
  cr_expect_eq(s.kind[1], XF__SETUP_SELECT);
  cr_expect_str_eq(s.cmd[1].argv[1], "3");
  cr_expect_eq(s.cmd[1].lens[1], 1);
  cr_expect_eq(s.kind[2], XF__SETUP_READONLY);
  cr_expect_eq(s.cmd[2].argc, 1);
  static const int preloaded[] = {
      XF_SCRIPT_READ,   XF_SCRIPT_LEASE,    XF_SCRIPT_WRITE,    XF_SCRIPT_RELEASE,
      XF_SCRIPT_DELETE, XF_SCRIPT_TAG_READ, XF_SCRIPT_TAG_BUMP, XF_SCRIPT_RENEW,
      XF_SCRIPT_TOUCH}; /* not read_many: the batch's */
  for (int i = 3; i < s.n; i++) {
    cr_expect_eq(s.kind[i], XF__SETUP_SCRIPT);
    cr_expect_str_eq(s.cmd[i].argv[0], "SCRIPT");
    cr_expect_eq(s.cmd[i].lens[2], xf__scripts[preloaded[i - 3]].len);
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
  cr_assert_eq(s.n, 1, "nothing to set up but whether a password is needed");
  cr_expect_eq(s.kind[0], XF__SETUP_PROBE);
  cr_expect_str_eq(s.cmd[0].argv[0], "HELLO");
  xf__setup_build(c, XF_SETUP_SCRIPTS, &s);
  cr_expect_eq(s.n, 9, "the SCRIPT LOADs ask it: no HELLO");
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
      {XF__SETUP_SELECT, "-ERR DB index is out of range\r\n", XF_EINVAL},
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
      {XF__SETUP_SCRIPT, "-NOAUTH Authentication required.\r\n", XF_EAUTH},
      {XF__SETUP_TRACKING, "-NOAUTH Authentication required.\r\n", XF_EAUTH},
      {XF__SETUP_TRACKING, "-ERR some refusal\r\n", XF_OK},
      {XF__SETUP_PROBE, "*2\r\n$6\r\nserver\r\n$5\r\nredis\r\n", XF_OK},
      {XF__SETUP_PROBE, "-ERR unknown command 'HELLO'\r\n", XF_OK},
      {XF__SETUP_PROBE, "-NOAUTH Authentication required.\r\n", XF_EAUTH},
      {XF__SETUP_PROBE, "-ERR Protocol error: unauthenticated multibulk length\r\n",
       XF_EAUTH},
      {XF__SETUP_PROBE,
       "-NOPERM this user has no permissions to run the 'hello' command\r\n", XF_OK},
      {XF__SETUP_PROBE, "-BUSY Redis is busy running a script.\r\n", XF_OK},
  };
  xf_client *c = configured(NULL, NULL, 5);
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    xf__reply *r = reply(cases[i].resp);
    c->errstr[0] = '\0';
    int rc = xf__setup_judge(c, cases[i].kind, r);
    cr_expect_eq(rc, cases[i].rc, "case %zu (%s): %s", i, cases[i].resp, xf_errname(rc));
    if (rc == XF_EINVAL)
      cr_expect(strstr(xf_errmsg(c), "db ") && strstr(xf_errmsg(c), "5"), "%s",
                xf_errmsg(c));
    if (rc != XF_OK && rc != XF_EINVAL)
      cr_expect(strstr(xf_errmsg(c), r->str), "the reply in the message: %s", xf_errmsg(c));
    xf__reply_free(r);
  }
  xf__reply *r = reply("-WRONGPASS invalid username-password pair\r\n");
  cr_expect_eq(xf__setup_judge(c, XF__SETUP_AUTH, r), XF_EAUTH);
  cr_expect_str_eq(xf_errmsg(c), "AUTH: WRONGPASS invalid username-password pair");
  xf__reply_free(r);
  xf_client_close(c);
}

/* ---- over a plain socket ----------------------------------------------------- */

static int setup_count(xf_client *c, int flags) {
  xf__setup s;
  xf__setup_build(c, flags, &s);
  return s.n;
}

/* Command i of c's setup for flags, in RESP, into b (emptied first). */
static void setup_bytes(xf_client *c, int flags, int i, xf__buf *b) {
  xf__setup s;
  xf__setup_build(c, flags, &s);
  cr_assert_lt(i, s.n);
  b->len = 0;
  cr_assert_eq(xf__resp_append_cmd(b, &s.cmd[i]), 0);
}

Test(setup, the_bytes_are_the_list_in_resp) {
  xf_client *c = configured("xfuser", "pw", 3);
  cr_assert_eq(setup_count(c, 0), 2);
  cr_expect_eq(setup_count(c, XF_SETUP_REPLICA), 3);
  cr_expect_eq(setup_count(c, XF_SETUP_SCRIPTS), 2 + 9);
  static const char *const want[] = {"*3\r\n$4\r\nAUTH\r\n$6\r\nxfuser\r\n$2\r\npw\r\n",
                                     "*2\r\n$6\r\nSELECT\r\n$1\r\n3\r\n",
                                     "*1\r\n$8\r\nREADONLY\r\n"};
  xf__buf b = {0};
  for (int i = 0; i < 3; i++) {
    setup_bytes(c, XF_SETUP_REPLICA, i, &b);
    cr_expect_eq(b.len, strlen(want[i]), "command %d", i);
    cr_expect_eq(memcmp(b.data, want[i], b.len), 0, "command %d: %.*s", i, (int)b.len,
                 b.data);
  }
  xf__buf_free(&b);
  xf_client_close(c);
}

/* Writes the client's setup on a fresh socket to port and judges each reply;
 * returns the first code that is not XF_OK (XF_OK when all are). */
static int run_setup(xf_client *c, int port, int flags) {
  redisContext *sock = xft_redis_port(port);
  xf_reader *rd;
  cr_assert_eq(xf_reader_open(&rd), XF_OK);
  int n = setup_count(c, flags), first = XF_OK;
  xf__buf b = {0};
  for (int i = 0; i < n; i++) { /* pipelined: every command, then every reply */
    setup_bytes(c, flags, i, &b);
    cr_assert_eq(write(sock->fd, b.data, b.len), (ssize_t)b.len);
  }
  xf__buf_free(&b);
  xf__setup s;
  xf__setup_build(c, flags, &s);
  for (int i = 0; i < n; i++) {
    xf_reply *reply = NULL;
    for (;;) {
      cr_assert_eq(xf_reader_next(rd, &reply), XF_OK);
      if (reply)
        break;
      char buf[4096];
      ssize_t got = read(sock->fd, buf, sizeof buf);
      cr_assert_gt(got, 0);
      cr_assert_eq(xf_reader_feed(rd, buf, (size_t)got), XF_OK);
    }
    int rc = xf__setup_judge(c, s.kind[i], (const struct xf_reply *)reply);
    xf_reply_free(reply);
    if (first == XF_OK)
      first = rc;
  }
  xf_reader_close(rd);
  redisFree(sock);
  return first;
}

Test(setup, a_real_server_judged_acl_user_db_wrongpass_and_noauth) {
  redisContext *r = xft_redis();
  freeReplyObject(xft_cmd(r, "ACL SETUSER setupuser on >pw ~* +@all"));
  xf_client *c = configured("setupuser", "pw", 3);
  cr_expect_eq(run_setup(c, xft_port(), XF_SETUP_SCRIPTS), XF_OK, "%s", xf_errmsg(c));
  xf_client_close(c);
  c = configured("setupuser", "wrong", 3);
  cr_expect_eq(run_setup(c, xft_port(), 0), XF_EAUTH);
  cr_expect(strstr(xf_errmsg(c), "AUTH: WRONGPASS"), "%s", xf_errmsg(c));
  xf_client_close(c);
  freeReplyObject(xft_cmd(r, "ACL DELUSER setupuser"));
  redisFree(r);

  xft_server s;
  const char *conf[] = {"--requirepass", "sesame", NULL};
  cr_assert_eq(xft_server_start(&s, conf), 0);
  c = configured(NULL, NULL, 2); /* no password: the server asks for one */
  cr_expect_eq(run_setup(c, s.port, 0), XF_EAUTH);
  cr_expect(strstr(xf_errmsg(c), "SELECT: NOAUTH"), "%s", xf_errmsg(c));
  xf_client_close(c);
  xft_server_stop(&s);
}
