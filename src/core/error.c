/* Return codes -> messages and names, generated from XF_ERRNO_MAP; a
 * message recorded on a client. */
#include <stdarg.h>
#include <stdio.h>

#include "client.h"
#include "xfetch.h"

const char *xf_strerror(int rc) {
  switch (rc) {
  case XF_OK:
    return "success";
#define XF_ERR_MSG(name, code, msg)                                                        \
  case XF_##name:                                                                          \
    return msg;
    XF_ERRNO_MAP(XF_ERR_MSG)
#undef XF_ERR_MSG
  }
  return "unknown error";
}

const char *xf_errname(int rc) {
  switch (rc) {
  case XF_OK:
    return "OK";
#define XF_ERR_NAME(name, code, msg)                                                       \
  case XF_##name:                                                                          \
    return #name;
    XF_ERRNO_MAP(XF_ERR_NAME)
#undef XF_ERR_NAME
  }
  return "UNKNOWN";
}

int xf__fail(xf_client *c, int rc, const char *fmt, ...) {
  if (c) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->errstr, sizeof c->errstr, fmt, ap);
    va_end(ap);
  }
  return rc;
}
