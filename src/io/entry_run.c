/* The entry protocol over xf__command (entry_run.h). */
#include "entry_run.h"

#include <string.h>

#include "client_io.h"
#include "script.h"

int xf__script_run(xf_client *c, int script, const xf__cmd *call, xf__reply **reply) {
  xf__cmd load;
  int rc = xf__command(c, call, reply);
  if (rc == XF_OK && xf__script_missing(*reply)) {
    xf__reply_free(*reply);
    *reply = NULL;
    xf__script_load_cmd(&load, script, call->key, call->keylen);
    rc = xf__command(c, &load, reply);
    if (rc == XF_OK)
      rc = xf__script_loaded(c, script, *reply);
    *reply = NULL;
    if (rc == XF_OK)
      rc = xf__command(c, call, reply);
  }
  if (rc != XF_OK || (*reply)->type != XF_REPLY_ERROR)
    return rc;
  rc = xf__script_error(c, script, *reply);
  *reply = NULL;
  return rc;
}

int xf__entry_read(xf_client *c, const char *key, size_t keylen, xf__entry *out) {
  xf__cmd cmd;
  xf__reply *r;
  memset(out, 0, sizeof *out);
  xf__entry_read_cmd(&cmd, key, keylen);
  int rc = xf__script_run(c, XF_SCRIPT_READ, &cmd, &r);
  return rc == XF_OK ? xf__entry_parse_read(c, r, out) : rc;
}

int xf__entry_lease(xf_client *c, const char *key, size_t keylen, int64_t lease_ms,
                    int64_t seen_expiry_ms, char token[40], int64_t *now_ms,
                    xf__lease_result *result, xf__entry *newer) {
  xf__cmd cmd;
  xf__reply *r;
  memset(newer, 0, sizeof *newer);
  xf__client_check_fork(c); /* never a parent's token in a child */
  xf__entry_token(c, token);
  xf__entry_lease_cmd(&cmd, key, keylen, token, lease_ms, seen_expiry_ms, 0);
  int rc = xf__script_run(c, XF_SCRIPT_LEASE, &cmd, &r);
  return rc == XF_OK ? xf__entry_parse_lease(c, r, now_ms, result, newer) : rc;
}

int xf__entry_write(xf_client *c, const char *key, size_t keylen, const xf__write *w,
                    int *written) {
  xf__cmd cmd;
  xf__reply *r;
  xf__entry_write_cmd(&cmd, key, keylen, w);
  int rc = xf__script_run(c, XF_SCRIPT_WRITE, &cmd, &r);
  return rc == XF_OK ? xf__entry_parse_int(c, r, "write", written) : rc;
}

int xf__entry_release(xf_client *c, const char *key, size_t keylen, const char *token) {
  xf__cmd cmd;
  xf__reply *r;
  int released;
  xf__entry_release_cmd(&cmd, key, keylen, token, 0);
  int rc = xf__script_run(c, XF_SCRIPT_RELEASE, &cmd, &r);
  return rc == XF_OK ? xf__entry_parse_int(c, r, "release", &released) : rc;
}

int xf__entry_delete(xf_client *c, const char *key, size_t keylen, int64_t tombstone_ms) {
  xf__cmd cmd;
  xf__reply *r;
  int deleted;
  xf__entry_delete_cmd(&cmd, key, keylen, tombstone_ms);
  int rc = xf__script_run(c, XF_SCRIPT_DELETE, &cmd, &r);
  return rc == XF_OK ? xf__entry_parse_int(c, r, "delete", &deleted) : rc;
}
