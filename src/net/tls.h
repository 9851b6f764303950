/* A client's TLS settings made ready once: an OpenSSL SSL_CTX with the trust
 * store (CA file, CA directory, or the system store), the optional client
 * certificate and key, TLS 1.2 as the floor, and peer verification on unless
 * turned off. Loading a trust store costs milliseconds, so every stream of a
 * client shares one xf__tls (stream.h) instead of loading it per connection.
 * Once made, an xf__tls is read-only except for its handshake counter
 * (atomic): streams on several threads may share it. */
#ifndef XF_TLS_H
#define XF_TLS_H

#include <stddef.h>
#include <stdint.h>

/* What xf_options' TLS part will carry; all zero = TLS off. Paths and names
 * are only read by xf__tls_new (copied where kept). */
typedef struct xf__tls_config {
  int enable;              /* non-zero: TLS (rediss://) */
  const char *ca_file;     /* PEM bundle of trusted CAs; NULL: ca_dir or the system */
  const char *ca_dir;      /* a c_rehash'd directory of CAs; NULL: ca_file or the system */
  const char *cert_file;   /* client certificate chain (PEM), for mutual TLS */
  const char *key_file;    /* its private key (PEM); NULL: in cert_file */
  const char *server_name; /* SNI and the name to verify; NULL: the host connected to */
  int no_verify;           /* non-zero: accept any certificate (tests, private nets) */
} xf__tls_config;

/* Read by stream.c; made by xf__tls_new only. */
typedef struct xf__tls {
  struct ssl_ctx_st *ctx; /* OpenSSL's SSL_CTX */
  char *server_name;      /* owned copy of cfg->server_name, or NULL */
  int verify;             /* certificate and host name checks on */
  uint64_t handshakes;    /* __atomic: completed handshakes */
} xf__tls;

/* Builds the TLS context for cfg (cfg->enable must be set). XF_OK with *out
 * set; XF_EINVAL when a file cannot be loaded or the key does not match the
 * certificate, XF_ENOMEM; the reason in err (never NULL when errlen > 0). */
int xf__tls_new(xf__tls **out, const xf__tls_config *cfg, char *err, size_t errlen);

/* Frees t (NULL-safe). Streams still open on t keep its SSL_CTX alive (OpenSSL
 * counts its references) but lose their counter: close them first. */
void xf__tls_free(xf__tls *t);

/* How many TLS handshakes completed on t's streams: one per connection made
 * (a bench shows that reconnects, not commands, cost handshakes). */
uint64_t xf__tls_handshakes(const xf__tls *t);

#endif
