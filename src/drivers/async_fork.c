/* A fork's child that keeps an event-loop handle (a prefork server opens,
 * forks, and each child re-makes its loop: uv_loop_fork, event_reinit).
 * What the handle holds per process is the parent's: its connections (the
 * same sockets: a command written there is the parent's stream, a reply
 * read there the parent's), the question on one of them, the near cache's
 * wake pipe, the client's identity. The child's first driver frame drops
 * them without a byte on the parent's sockets and without reading them;
 * the next command opens a connection of the child's own.
 *
 * The parent's commands on the wire at the fork are the parent's: the child
 * ends its copies of their calls as a lost connection does (XF_EIO: a
 * get-or-compute fails open through its loader, a get, set or delete
 * fails), never resent (the parent may have them run: a lease taken twice
 * under one token, a write twice), and the breaker is left alone (the
 * server is fine). The ends are fed on the next tick, never inside the
 * xf_async_* call that noticed the fork. The calls that were not on the
 * wire (waiting, parked, corked) go on in the child on its connection.
 *
 * The loop's timer needs nothing: the re-made loop keeps it, and the
 * handle's one timer is re-armed as the frame leaves. A resolver thread is
 * not in the child: its stream is dropped with its connection. */
#include "async.h"
#include "client_io.h"

void xf__afork_check(xf_async *ac) {
  unsigned long gen = xf__fork_generation();
  if (ac->fork_gen == gen)
    return;
  ac->fork_gen = gen;
  xf__client_check_fork(ac->core); /* never the parent's lease tokens or draws */
  xf__aroute_forget_question(ac);
  ac->forking = 1;
  xf__aconn_forked(ac);
  ac->forking = 0;
  xf__aroute_ask_again(ac);
  xf__awake_forked(ac);
}
