/* <xfetch/base.h>: the export macro, the version and the return codes.
 *
 * One part of the public API, which <xfetch.h> includes whole; it compiles
 * on its own (it includes the parts it needs). */
#ifndef XFETCH_BASE_H
#define XFETCH_BASE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(XFETCH_BUILDING) && defined(__GNUC__)
#define XF_EXPORT __attribute__((visibility("default")))
#else
#define XF_EXPORT
#endif

#define XF_VERSION_MAJOR 0
#define XF_VERSION_MINOR 1
#define XF_VERSION_PATCH 0

/* The error list: XF_ERR(NAME, code, message). Codes are frozen once
 * released; new ones are appended. */
#define XF_ERRNO_MAP(XF_ERR)                                                               \
  XF_ERR(EINVAL, -1, "invalid argument")                                                   \
  XF_ERR(ENOMEM, -2, "out of memory")                                                      \
  XF_ERR(ECONNECT, -3, "cannot connect to Redis")                                          \
  XF_ERR(EIO, -4, "Redis connection failed (I/O error or timeout)")                        \
  XF_ERR(EREDIS, -5, "Redis replied with an error")                                        \
  XF_ERR(EPROTO, -6, "unexpected reply from Redis")                                        \
  XF_ERR(ETIMEDOUT, -7, "timed out waiting for another caller's computation")              \
  XF_ERR(ELOADER, -8, "the loader failed")                                                 \
  XF_ERR(ENOTFOUND, -9, "not found (negative entry)")                                      \
  XF_ERR(EWRONGTYPE, -10, "the key holds a value that is not an xfetch entry")             \
  XF_ERR(EAUTH, -11, "Redis authentication or database selection failed")                  \
  XF_ERR(EUNAVAILABLE, -12,                                                                \
         "Redis cannot serve this command right now (busy, loading, read-only, out of "    \
         "memory)")                                                                        \
  XF_ERR(ENOPERM, -13, "the Redis ACL user may not run a command xfetch needs")            \
  XF_ERR(ESUPERSEDED, -14, "not cached: a newer value or a delete won")                    \
  XF_ERR(ECANCELED, -15, "canceled: interrupted, or its handle closed")                    \
  XF_ERR(EBUSY, -16, "every pooled client stayed busy for the checkout timeout")           \
  XF_ERR(ETLS, -17,                                                                        \
         "TLS failed: certificate not trusted, host name mismatch, or the handshake "      \
         "failed or timed out")                                                            \
  XF_ERR(ENOTREPLICATED, -18,                                                              \
         "written on the master, but no replica acknowledged it in time: a failover may "  \
         "lose it")

/* Return codes. */
enum {
  XF_OK = 0,
#define XF_ERR_ENUM(name, code, msg) XF_##name = (code),
  XF_ERRNO_MAP(XF_ERR_ENUM)
#undef XF_ERR_ENUM
};

/* A static, human-readable message for a return code ("unknown error" for
 * codes not in the list). Never NULL. */
XF_EXPORT const char *xf_strerror(int rc);

/* The code's name without prefix, e.g. "EINVAL" for XF_EINVAL, "OK" for 0,
 * "UNKNOWN" otherwise. Never NULL. */
XF_EXPORT const char *xf_errname(int rc);

#ifdef __cplusplus
}
#endif

#endif /* XFETCH_BASE_H */
