/* The batch's waits with a near cache: wake-on-write. A batch key that
 * another caller is loading waits until its value is written (the write
 * invalidates the key: the near cache is told, whoever wrote it) and is read
 * again at once, instead of polling Redis; the poll stays the fallback
 * (every 200 ms: flow_compute.c), for a lease whose holder died without a
 * write. One key waiting sleeps on the near cache's shard as the blocking
 * and pool drivers do (xf__drive_sleep); several keys, in as many shards,
 * sleep on a wake pipe the near cache writes a byte to on every
 * invalidation (as xf_call_wake_open's), opened for the batch's first such
 * wait and closed with the batch. */
#include <poll.h>
#include <unistd.h>

#include "batch.h"
#include "flow_steps.h"
#include "wake_pipe.h"

#define SLICE_MS 50 /* how often a sleeping batch asks options.interrupt */

static int wakes_on_write(const batch *b, size_t i) {
  return b->steps[i] == XF_STEP_WAIT && b->flows[i].state == XF__WAIT &&
         b->flows[i].wake_on_write;
}

int xf__batch_woken(const batch *b, size_t i) {
  const xf__flow *f = &b->flows[i];
  return wakes_on_write(b, i) && b->c->ports.near->changed(b->c->ports.self, f->key.data,
                                                           f->key.len, f->near_token);
}

static int any_woken(const batch *b) {
  for (size_t i = 0; i < b->n; i++)
    if (xf__batch_woken(b, i))
      return 1;
  return 0;
}

/* The batch's wake pipe, registered with the near cache: 0 when there is
 * none (no pipe, no memory: the waits then poll). */
static int open_pipe(batch *b) {
  if (b->wake_rd > 0)
    return 1;
  int p[2];
  if (xf__wake_pipe_open(b->c, p) != XF_OK)
    return 0;
  b->wake_rd = p[0];
  b->wake_wr = p[1];
  return 1;
}

void xf__batch_wake_close(batch *b) {
  if (b->wake_rd <= 0)
    return;
  xf__wake_pipe_close(b->c, b->wake_rd, b->wake_wr);
  b->wake_rd = b->wake_wr = 0;
}

int xf__batch_sleep(batch *b, int64_t wake_ms) {
  size_t waiting = 0, one = 0;
  for (size_t i = 0; i < b->n; i++)
    if (wakes_on_write(b, i))
      waiting++, one = i;
  if (waiting <= 1 || !open_pipe(b)) /* its shard's wait, or a plain sleep */
    return xf__drive_sleep(&b->flows[one], wake_ms);
  /* Registered before the check: an invalidation since a key's read is seen
   * by the check, one after it by the pipe. */
  for (;;) {
    if (any_woken(b))
      return 0;
    int64_t now_ms = xf__now_ms();
    if (now_ms >= wake_ms)
      return 0;
    int64_t until_ms = wake_ms < now_ms + SLICE_MS ? wake_ms : now_ms + SLICE_MS;
    struct pollfd pfd = {.fd = b->wake_rd, .events = POLLIN};
    if (poll(&pfd, 1, (int)(until_ms - now_ms)) > 0) {
      char buf[64];
      while (read(b->wake_rd, buf, sizeof buf) > 0)
        ;
    }
    if (xf__flow_interrupted(&b->flows[one]))
      return 1;
  }
}
