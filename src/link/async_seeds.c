/* Which of options.host's seeds a standalone event-loop handle talks to, as
 * the blocking client walks them (client.c, open_a_seed): the seed in use
 * (ac->main) while it works, else the next one in the list that takes the
 * command, wrapping around. A seed that fails to come up hands its place to
 * the next one, so that the calls after it do not try it first.
 *
 * A connection comes up in the background: a dead seed (refused, or silent until
 * the connect timeout) is only known after calls were queued on it. Those
 * commands were never written, so they go to the next seed instead of failing
 * open; a connection that was up and dropped its commands does not qualify
 * (they may have run: the flow fails open as with one seed). */
#include "async.h"

/* conns[0..n) are the seeds, in options.host's order. */
static int nseeds(const xf_async *ac) { return ac->core->unix_path ? 1 : ac->core->nseeds; }

static int seed_index(const xf_async *ac, const xf__aconn *cn) {
  for (int i = 0; i < nseeds(ac); i++)
    if (ac->conns[i] == cn)
      return i;
  return -1;
}

void xf__aseeds_down(xf__aconn *cn) {
  xf_async *ac = cn->ac;
  int at = seed_index(ac, cn);
  if (ac->core->routes.mode == XF_ROUTE_STANDALONE && cn == ac->main && at >= 0)
    ac->main = ac->conns[(at + 1) % nseeds(ac)];
}

/* The seed in use, then the others in order: try(cn) on each until one is
 * not XF_ECONNECT; that one is the seed in use from then on. */
static int walk(xf_async *ac, xf__acall *k) {
  int n = nseeds(ac), at = seed_index(ac, ac->main), rc = XF_ECONNECT;
  for (int i = 0; i < n && rc == XF_ECONNECT; i++) {
    xf__aconn *cn = ac->conns[(at + i) % n];
    rc = k ? xf__aconn_send(k, cn, 0) : xf__aconn_open(cn);
    if (rc == XF_OK)
      ac->main = cn;
  }
  return rc;
}

int xf__aseeds_open(xf_async *ac) { return walk(ac, NULL); }

int xf__aseeds_send(xf__acall *k) { return walk(k->ac, k); }

int xf__aseeds_resend(xf__acall *k, xf__aconn *cn) {
  xf_async *ac = k->ac;
  if (ac->core->routes.mode != XF_ROUTE_STANDALONE || !cn->failed_connect ||
      seed_index(ac, cn) < 0 || ++k->attempts >= nseeds(ac))
    return 0;
  return walk(ac, k) == XF_OK; /* from the seed after cn (xf__aseeds_down) */
}
