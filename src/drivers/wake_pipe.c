/* A wake pipe on a client's near cache (wake_pipe.h). */
#include <fcntl.h>
#include <unistd.h>

#include "wake_pipe.h"

int xf__wake_pipe_open(xf_client *c, int p[2]) {
  if (pipe2(p, O_NONBLOCK | O_CLOEXEC) != 0)
    return XF_ENOMEM;
  if (c->ports.near->notify_add(c->ports.self, p[1]) != XF_OK) {
    close(p[0]), close(p[1]);
    return XF_ENOMEM;
  }
  return XF_OK;
}

void xf__wake_pipe_close(xf_client *c, int rd, int wr) {
  c->ports.near->notify_remove(c->ports.self, wr);
  close(wr);
  if (rd >= 0)
    close(rd);
}
