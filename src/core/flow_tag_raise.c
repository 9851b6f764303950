/* A tag's raise fenced (xf_invalidate_tags; the raise itself, its key and
 * the next tag: flow_tags.c). After each raise, on the same connection:
 *
 *   - a PING (the write fence, flow.c, whatever options.write_fence says):
 *     its reply comes after Redis sent the invalidations the raise caused,
 *     so once the call returns every near cache of the fleet can see them;
 *   - or, where the router's slot map gives the tag's master a replica,
 *     WAIT 1 <half the command timeout>. Replication is asynchronous: a
 *     raise the master acknowledged and no replica received is lost when a
 *     replica takes over, and the entries it invalidated are current again.
 *     WAIT's reply also comes after the invalidations went out, and says how
 *     many replicas have the raise: none ends the call with
 *     XF_ENOTREPLICATED (the raise stays on the master; the caller makes the
 *     call again). WAIT counts the writes of its own connection (on a fresh
 *     one, none: it would answer at once), so it must go on the raise's
 *     stream: where the transport says it went on another, the tag is
 *     raised once more, then the call fails (XF_EIO).
 *
 * Standalone Redis knows no replicas here: the PING. */
#include <stdio.h>

#include "client.h"
#include "cluster.h"
#include "flow_steps.h"
#include "near.h"

/* The fence after a raise, on the tag's key: where its raise went. */
void xf__flow_tags_fence_cmd(xf__flow *f) {
  xf__cmd *cmd = &f->cmd;
  xf__cmd_begin(cmd, f->tag_key.data, f->tag_key.len);
  f->tag_fence_stream = 0;
  cmd->stream_out = &f->tag_fence_stream;
  if (!f->tag_wait) {
    cmd->argc = 1;
    cmd->argv[0] = "PING";
    cmd->lens[0] = 4;
    return;
  }
  int n = snprintf(cmd->scratch[0], sizeof cmd->scratch[0], "%d", f->cfg->tag_wait_ms);
  cmd->argc = 3;
  cmd->argv[0] = "WAIT", cmd->lens[0] = 4;
  cmd->argv[1] = "1", cmd->lens[1] = 1;
  cmd->argv[2] = cmd->scratch[0], cmd->lens[2] = (size_t)n;
}

/* Whether the router's slot map gives the master of the tag's key a
 * replica (standalone: no map, no replica known). */
static int has_replica(const xf__flow *f) {
  const struct xf__cluster_map *m = f->rt->slot_map;
  if (!m || f->rt->one_node)
    return 0;
  int slot = xf__cluster_keyslot(f->tag_key.data, f->tag_key.len);
  return xf__cluster_map_replicas(m, xf__cluster_map_master(m, slot), NULL, 0) > 0;
}

/* A tag raised: its near copy dropped, then the fence, to the node the
 * raise went to (with ASKING again where an ASK led it there). */
xf__step xf__flow_tags_raised(xf__flow *f) {
  const xf__ports *ports = &f->rt->ports;
  if (ports->near)
    ports->near->drop(ports->self, f->tag_key.data, f->tag_key.len);
  /* always: an invalidation is rare, a near hit of an old version not */
  f->tag_fencing = 1;
  f->tag_wait = has_replica(f);
  int asked = f->asked;
  xf__step step = xf__flow_send(f, XF__BUMP);
  f->cmd.ask_node = asked;
  return step;
}

/* On to the next tag, this one fenced. */
static xf__step raise_next(xf__flow *f) {
  f->tag_raised_again = 0;
  f->tag_i++;
  return xf__flow_tags_raise_next(f);
}

/* The fence's reply. A PING's failure is counted, not returned: the raise
 * was acknowledged. A WAIT answers how many replicas have the raise: one at
 * least, on the raise's stream, and the next tag is raised; on another
 * stream, the tag is raised once more; else the call ends with what is
 * known. */
xf__step xf__flow_tags_fenced(xf__flow *f, int rc, xf__reply *r) {
  f->tag_fencing = 0;
  if (!f->tag_wait) {
    if (rc != XF_OK || (r && r->type == XF_REPLY_ERROR))
      f->rt->stats.fence_failed++;
    if (r)
      xf__reply_free(r);
    return raise_next(f);
  }
  const char *key = f->tag_key.data;
  int len = (int)f->tag_key.len;
  long long acked = 0;
  if (rc == XF_OK) {
    if (r->type == XF_REPLY_INTEGER)
      acked = r->integer;
    else if (r->type == XF_REPLY_ERROR)
      rc = xf__rt_fail(f->rt, XF_EREDIS, "WAIT after raising %.*s: %.*s", len, key,
                       (int)r->len, r->str);
    else
      rc = xf__rt_fail(f->rt, XF_EPROTO, "WAIT after raising %.*s: not an integer", len,
                       key);
    xf__reply_free(r);
  }
  if (rc != XF_OK)
    return xf__flow_done(f, rc);
  if (f->tag_raise_stream && f->tag_fence_stream &&
      f->tag_raise_stream != f->tag_fence_stream) { /* a stream replaced in between */
    if (f->tag_raised_again)
      return xf__flow_done(f, xf__rt_fail(f->rt, XF_EIO,
                                          "raising %.*s: its WAIT went on another "
                                          "connection twice",
                                          len, key));
    f->tag_raised_again = 1;
    return xf__flow_send(f, XF__BUMP);
  }
  if (acked < 1)
    return xf__flow_done(
        f, xf__rt_fail(f->rt, XF_ENOTREPLICATED,
                       "%.*s raised on its master, but no replica acknowledged it within "
                       "%d ms: a failover may lose it",
                       len, key, f->cfg->tag_wait_ms));
  return raise_next(f);
}
