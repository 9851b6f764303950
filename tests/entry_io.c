/* Blocking runs of single entry scripts for tests (entry_io.h). */
#include <string.h>

#include "client_io.h"
#include "entry_io.h"
#include "script.h"

/* Sends cmd, a call of script (SCRIPT LOAD and again on NOSCRIPT): XF_OK with
 * a reply that is not an error reply, else the error reply's code. */
static int run(xf_client *c, int script, const xf__cmd *cmd, xf__reply **reply) {
  int rc = xf__command(c, cmd, reply);
  if (rc == XF_OK && xf__reply_classify(*reply) == XF_REPLY_NOSCRIPT) {
    xf__reply_free(*reply);
    xf__cmd load;
    xf__script_load_cmd(&load, script, cmd->key, cmd->keylen);
    rc = xf__command(c, &load, reply);
    if (rc == XF_OK)
      rc = xf__script_loaded(&c->rt, script, *reply);
    if (rc == XF_OK)
      rc = xf__command(c, cmd, reply);
  }
  if (rc != XF_OK || (*reply)->type != XF_REPLY_ERROR)
    return rc;
  return xf__script_error(&c->rt, script, *reply);
}

int xft_entry_lease(xf_client *c, const char *key, size_t keylen, int64_t lease_ms,
                    int64_t seen_expiry_ms, char token[40], int64_t *now_ms,
                    xf__lease_result *result, xf__entry *newer) {
  xf__cmd cmd;
  xf__reply *r;
  memset(newer, 0, sizeof *newer);
  xf__client_check_fork(c); /* never a parent's token in a child */
  xf__entry_token(&c->cfg, &c->rt, token);
  xf__entry_lease_cmd(&cmd, key, keylen, token, lease_ms, seen_expiry_ms, 0,
                      c->entry_format);
  int rc = run(c, XF_SCRIPT_LEASE, &cmd, &r);
  return rc == XF_OK ? xf__entry_parse_lease(&c->rt, r, now_ms, result, newer) : rc;
}

int xft_entry_write(xf_client *c, const char *key, size_t keylen, const xf__write *w,
                    int *written) {
  xf__cmd cmd;
  xf__reply *r;
  xf__entry_write_cmd(&cmd, key, keylen, w, c->entry_format);
  int rc = run(c, XF_SCRIPT_WRITE, &cmd, &r);
  return rc == XF_OK ? xf__entry_parse_int(&c->rt, r, "write", written) : rc;
}

int xft_entry_touch(xf_client *c, const char *key, size_t keylen, const xf__touch *t,
                    int *touched) {
  xf__cmd cmd;
  xf__reply *r;
  xf__entry_touch_cmd(&cmd, key, keylen, t);
  int rc = run(c, XF_SCRIPT_TOUCH, &cmd, &r);
  return rc == XF_OK ? xf__entry_parse_int(&c->rt, r, "touch", touched) : rc;
}

int xft_entry_release(xf_client *c, const char *key, size_t keylen, const char *token) {
  xf__cmd cmd;
  xf__reply *r;
  int released;
  xf__entry_release_cmd(&cmd, key, keylen, token, 0, 0);
  int rc = run(c, XF_SCRIPT_RELEASE, &cmd, &r);
  return rc == XF_OK ? xf__entry_parse_int(&c->rt, r, "release", &released) : rc;
}
