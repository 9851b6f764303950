/* A sans-I/O driver's connections (xf_call_conn_*): each keeps the estimate
 * of its server's clock (clock.h) the replies of the calls sent on it
 * taught, so that a read on it is one plain command (HMGET, GET) while the
 * estimate is fresh, as on the other drivers' connections, and one read
 * script per connection per refresh (xf__clock_refreshing) however many
 * calls are in flight. The call's
 * request holds the read script until the driver names the connection
 * (call_route.c); xf_call_use_conn swaps its last command. */
#include <stdlib.h>

#include "call.h"
#include "entry.h"

int xf_call_conn_open(xf_call_conn **out) {
  if (!out)
    return XF_EINVAL;
  *out = malloc(sizeof **out);
  if (!*out)
    return XF_ENOMEM;
  xf_call_conn_reset(*out);
  return XF_OK;
}

void xf_call_conn_reset(xf_call_conn *conn) {
  if (!conn)
    return;
  xf__clock_reset(&conn->clock); /* nothing known */
  conn->asked_ms = -1;
}

void xf_call_conn_close(xf_call_conn *conn) { free(conn); }

int xf_call_use_conn(xf_call *call, xf_call_conn *conn, int64_t now_ms) {
  if (!call || !conn || call->step != XF_STEP_SEND)
    return XF_EINVAL;
  call->conn = conn;
  const xf__cmd *cmd = &call->f.cmd;
  if (call->probe != PROBE_NONE || !cmd->plain_out)
    return XF_OK; /* not a read: its bytes are the same on any connection */
  int was = *cmd->plain_out;
  xf__cmd script;
  const xf__cmd *sent = cmd;
  if (xf__clock_refreshing(&conn->clock, conn->asked_ms, now_ms))
    *cmd->plain_out = 1; /* behind the script in flight: it teaches the clock first */
  else
    sent = xf__entry_read_as(cmd, &conn->clock, now_ms, &script);
  if (sent == &script) /* this one refreshes the estimate */
    conn->asked_ms = now_ms;
  if (*cmd->plain_out == was)
    return XF_OK;
  size_t had = call->request.len;
  call->request.len = call->cmd_at; /* what goes before it stays (ASKING, ...) */
  if (xf__resp_append_cmd(&call->request, sent) != 0) {
    call->request.len = had; /* the bytes as they were: still to be sent */
    *cmd->plain_out = was;
    return XF_ENOMEM;
  }
  return XF_OK;
}
