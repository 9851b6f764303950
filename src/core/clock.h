/* The server's clock as a client knows it without asking on every hit: per
 * connection, the bounds of (server time - the driver's monotonic time),
 * learned from a reply that carries the server's time (the read and lease
 * scripts) between the driver times its request left (no earlier than) and
 * its reply was in (no later than). Pure arithmetic: the times are inputs. */
#ifndef XF_CLOCK_H
#define XF_CLOCK_H

#include <stdint.h>

/* How long a sample is trusted: past it (or when the driver's clock went
 * back) the next read asks the server again (the read script). */
#define XF_CLOCK_REFRESH_MS 1000

/* How far the two clocks may drift apart, in ms per second of a sample's
 * age (1,000 ppm: ten times what NTP tolerates), rounded up. */
#define XF_CLOCK_DRIFT_PER_S 1

typedef struct xf__clock {
  int64_t lo, hi;     /* server ms - driver ms lies in [lo, hi] */
  int64_t learned_ms; /* driver ms of the sample */
  int known;          /* 0: nothing learned since the connection was set up */
} xf__clock;

/* Forgets everything (a new connection: maybe another server). */
void xf__clock_reset(xf__clock *k);

/* A reply read at server ms server_ms, to a request sent no earlier than
 * sent_ms and read no later than recv_ms (driver ms). Narrows the estimate
 * when it agrees with the one held, else replaces it (the server's clock
 * was set). */
void xf__clock_learn(xf__clock *k, int64_t server_ms, int64_t sent_ms, int64_t recv_ms);

/* Whether a plain read (HMGET) may go on the connection of k at driver ms
 * now_ms: its estimate is known and younger than half the refresh period
 * (so it is still usable when the reply is in). Else the read script goes
 * instead, and refreshes it. NULL: no. */
int xf__clock_fresh(const xf__clock *k, int64_t now_ms);

/* Whether a read script sent at driver ms asked_ms (-1: none) on k's
 * connection to refresh k is still to be answered (for at most half the
 * refresh period). A plain read queued behind it may go as the plain
 * command: replies come in order, so its flow learns the clock before that
 * read's reply is judged. One script per connection per refresh, however
 * many calls are in flight. (Should the script not teach the clock, an error
 * reply, the plain read's flow asks again with the script.) */
int xf__clock_refreshing(const xf__clock *k, int64_t asked_ms, int64_t now_ms);

/* The server's time at driver ms now_ms lies in [*lo, *hi] (drift included).
 * 1, or 0 when the estimate is unknown or too old to use (then ask). */
int xf__clock_server_now(const xf__clock *k, int64_t now_ms, int64_t *lo, int64_t *hi);

#endif
