#include "link_net.h"

#include <criterion/criterion.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int dial(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static void drop_socket(xft_net *n) {
  if (n->fd >= 0)
    close(n->fd);
  n->fd = -1;
}

xft_net xft_net_open(xf_client *c, int port, int flags) {
  xft_net n = {.fd = -1, .port = port};
  cr_assert_eq(xf_link_open(&n.link, c, "127.0.0.1", port, flags), XF_OK);
  return n;
}

void xft_net_close(xft_net *n) {
  xf_link_close(n->link);
  drop_socket(n);
}

int64_t xft_net_now(const xft_net *n) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + n->skew_ms;
}

xf_call *xft_net_pump(xft_net *n) {
  for (;;) {
    xf_call *ready = xf_link_ready(n->link);
    if (ready)
      return ready;
    if (xf_link_wants_stream(n->link)) {
      drop_socket(n);
      if (xf_link_start(n->link, xft_net_now(n)) != XF_OK)
        continue; /* the breaker: the calls moved */
      n->connects++;
      if ((n->fd = dial(n->port)) < 0) {
        xf_link_failed(n->link, XF_LINK_BROKEN, "connect refused", xft_net_now(n));
        continue;
      }
      xf_link_connected(n->link, n->fd, xft_net_now(n));
    }
    cr_assert_geq(n->fd, 0, "a call waits on a link without a stream");
    size_t len;
    const char *out = xf_link_output(n->link, &len);
    if (len) {
      ssize_t w = send(n->fd, out, len, MSG_NOSIGNAL);
      if (w < 0) {
        xf_link_failed(n->link, XF_LINK_CLOSED, "broken pipe", xft_net_now(n));
        drop_socket(n);
        continue;
      }
      xf_link_written(n->link, (size_t)w);
      continue;
    }
    struct pollfd p = {.fd = n->fd, .events = POLLIN};
    cr_assert_eq(poll(&p, 1, 5000), 1, "no reply in 5 s");
    char buf[4096];
    ssize_t got = recv(n->fd, buf, sizeof buf, 0);
    if (got <= 0) {
      xf_link_failed(n->link, XF_LINK_CLOSED, got ? "reset" : "closed", xft_net_now(n));
      drop_socket(n);
    } else if (xf_link_feed(n->link, buf, (size_t)got, xft_net_now(n)) != XF_OK) {
      drop_socket(n);
    }
  }
}

xf_call_step xft_net_exchange(xft_net *n, xf_call *call) {
  cr_assert_eq(xf_call_send(call, n->link, xft_net_now(n)), XF_OK);
  cr_assert_eq(xft_net_pump(n), call);
  return xf_call_received(call, xft_net_now(n));
}
