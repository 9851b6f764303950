/* The shared TLS context (tls.h): one SSL_CTX per client, built from
 * xf__tls_config. */
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tls.h"
#include "xfetch.h"

/* Formats "<what>: <OpenSSL's reason>" into err and returns code. OpenSSL's
 * error queue is per thread: it is emptied here so a later call on this
 * thread does not report a stale reason. */
static int fail(int code, char *err, size_t errlen, const char *fmt, ...) {
  char what[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  unsigned long e = ERR_peek_last_error();
  const char *reason = e ? ERR_reason_error_string(e) : NULL;
  if (errlen)
    snprintf(err, errlen, "%s%s%s", what, reason ? ": " : "", reason ? reason : "");
  ERR_clear_error();
  return code;
}

/* The trust store: the files given, or the system's (what curl and
 * redis-cli do when no CA is named). */
static int load_trust(SSL_CTX *ctx, const xf__tls_config *cfg, char *err, size_t errlen) {
  if (cfg->ca_file || cfg->ca_dir) {
    if (SSL_CTX_load_verify_locations(ctx, cfg->ca_file, cfg->ca_dir) != 1)
      return fail(XF_EINVAL, err, errlen, "TLS CA %s %s cannot be loaded",
                  cfg->ca_file ? "file" : "directory",
                  cfg->ca_file ? cfg->ca_file : cfg->ca_dir);
  } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
    return fail(XF_EINVAL, err, errlen, "the system's TLS CA store cannot be loaded");
  }
  return XF_OK;
}

static int load_identity(SSL_CTX *ctx, const xf__tls_config *cfg, char *err,
                         size_t errlen) {
  if (!cfg->cert_file && !cfg->key_file)
    return XF_OK;
  if (!cfg->cert_file)
    return fail(XF_EINVAL, err, errlen, "a TLS client key needs its certificate");
  const char *key = cfg->key_file ? cfg->key_file : cfg->cert_file;
  if (SSL_CTX_use_certificate_chain_file(ctx, cfg->cert_file) != 1)
    return fail(XF_EINVAL, err, errlen, "TLS client certificate %s cannot be loaded",
                cfg->cert_file);
  if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1)
    return fail(XF_EINVAL, err, errlen, "TLS client key %s cannot be loaded", key);
  if (SSL_CTX_check_private_key(ctx) != 1)
    return fail(XF_EINVAL, err, errlen, "TLS client key %s does not match %s", key,
                cfg->cert_file);
  return XF_OK;
}

static int configure(xf__tls *t, const xf__tls_config *cfg, char *err, size_t errlen) {
  SSL_CTX *ctx = t->ctx;
  if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1)
    return fail(XF_EINVAL, err, errlen, "TLS 1.2 cannot be set as the minimum");
  /* Partial writes: a non-blocking write hands back what one record took,
   * and the caller's buffer may move (grow) between a WANT_WRITE and its
   * retry. An EOF without close_notify is a plain close: RESP frames its
   * own lengths, so a truncation cannot pass for a whole reply, and a Redis
   * that drops an idle client must read as "closed", not as an attack. */
  SSL_CTX_set_mode(ctx,
                   SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION);
  /* Read ahead: one recv takes what the socket holds (a reply's record,
   * header and body together) instead of the 5-byte header and then the
   * body: a TLS hit costs the plain hit's one read, not two. Bytes read
   * ahead show in SSL_has_pending (xf__stream_pending), so no reader waits
   * on a descriptor for bytes OpenSSL already holds. */
  SSL_CTX_set_read_ahead(ctx, 1);
  t->verify = !cfg->no_verify;
  SSL_CTX_set_verify(ctx, t->verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
  int rc = t->verify ? load_trust(ctx, cfg, err, errlen) : XF_OK;
  if (rc == XF_OK)
    rc = load_identity(ctx, cfg, err, errlen);
  if (rc == XF_OK && cfg->server_name && !(t->server_name = strdup(cfg->server_name)))
    rc = XF_ENOMEM;
  return rc;
}

int xf__tls_new(xf__tls **out, const xf__tls_config *cfg, char *err, size_t errlen) {
  *out = NULL;
  if (errlen)
    err[0] = '\0';
  ERR_clear_error();
  xf__tls *t = calloc(1, sizeof *t);
  if (!t)
    return XF_ENOMEM;
  if (!(t->ctx = SSL_CTX_new(TLS_client_method()))) {
    free(t);
    return fail(XF_ENOMEM, err, errlen, "cannot create the TLS context");
  }
  int rc = configure(t, cfg, err, errlen);
  if (rc != XF_OK) {
    if (rc == XF_ENOMEM && errlen && !err[0])
      snprintf(err, errlen, "out of memory for the TLS settings");
    xf__tls_free(t);
    return rc;
  }
  *out = t;
  return XF_OK;
}

void xf__tls_free(xf__tls *t) {
  if (!t)
    return;
  SSL_CTX_free(t->ctx);
  free(t->server_name);
  free(t);
}

uint64_t xf__tls_handshakes(const xf__tls *t) {
  return t ? __atomic_load_n(&t->handshakes, __ATOMIC_RELAXED) : 0;
}
