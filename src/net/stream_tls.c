/* The stream's TLS (stream.h): OpenSSL over the stream's own socket I/O,
 * the handshake with SNI and host name verification, and failures worded
 * for people: which certificate, which name, which stage. */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "stream_impl.h"

/* ---- socket I/O for OpenSSL --------------------------------------------- */
/* OpenSSL's socket BIO writes with write(2), which raises SIGPIPE on a
 * closed peer; ours sends with MSG_NOSIGNAL, and sees the server's first
 * bytes and its EOF, which say "not TLS" or "closed" better than OpenSSL's
 * "wrong version number". */

static int bio_write(BIO *b, const char *data, int len) {
  xf__stream *s = BIO_get_data(b);
  BIO_clear_retry_flags(b);
  ssize_t n;
  do
    n = send(s->fd, data, (size_t)len, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n >= 0)
    return (int)n;
  if (errno == EAGAIN || errno == EWOULDBLOCK)
    BIO_set_retry_write(b);
  else
    s->sys_errno = errno;
  return -1;
}

static int bio_read(BIO *b, char *buf, int len) {
  xf__stream *s = BIO_get_data(b);
  BIO_clear_retry_flags(b);
  ssize_t n;
  do
    n = recv(s->fd, buf, (size_t)len, 0);
  while (n < 0 && errno == EINTR);
  s->recvs++;
  if (n > 0)
    xf__stream_note(s, buf, (size_t)n);
  else if (n == 0)
    s->peer_eof = 1;
  else if (errno == EAGAIN || errno == EWOULDBLOCK)
    BIO_set_retry_read(b);
  else
    s->sys_errno = errno;
  return n < 0 ? -1 : (int)n;
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr) {
  (void)b, (void)num, (void)ptr;
  return cmd == BIO_CTRL_FLUSH; /* nothing buffered here; the rest: unsupported */
}

static BIO_METHOD *bio_method;
static pthread_once_t bio_once = PTHREAD_ONCE_INIT;

/* Made once per process and never freed: it is a small static table. */
static void make_bio_method(void) {
  BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "xfetch socket");
  if (m && (!BIO_meth_set_write(m, bio_write) || !BIO_meth_set_read(m, bio_read) ||
            !BIO_meth_set_ctrl(m, bio_ctrl))) {
    BIO_meth_free(m);
    m = NULL;
  }
  bio_method = m;
}

/* ---- the handshake -------------------------------------------------------- */

static int is_ip(const char *name) {
  unsigned char buf[sizeof(struct in6_addr)];
  return inet_pton(AF_INET, name, buf) == 1 || inet_pton(AF_INET6, name, buf) == 1;
}

/* SNI carries host names only (RFC 6066); an address is checked against the
 * certificate's IP entries, a name against its DNS entries. */
static int set_names(xf__stream *s) {
  int ip = is_ip(s->name);
  if (s->name[0] && !ip && SSL_set_tlsext_host_name(s->ssl, s->name) != 1)
    return 0;
  if (!s->tls->verify || !s->name[0])
    return 1;
  X509_VERIFY_PARAM *param = SSL_get0_param(s->ssl);
  X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
  return ip ? X509_VERIFY_PARAM_set1_ip_asc(param, s->name) == 1
            : SSL_set1_host(s->ssl, s->name) == 1;
}

/* Called when the server asks for a client certificate (mutual TLS). With
 * none configured, a TLS 1.3 server's refusal comes after our handshake has
 * ended, as an alert or, when it closes with our first command unread, as a
 * reset that destroys the alert: remembering the question words both. */
static int on_cert_request(SSL *ssl, void *arg) {
  xf__stream *s = arg;
  if (!SSL_get_certificate(ssl))
    s->cert_missing = 1;
  return 1; /* go on: the server decides */
}

xf__io xf__stream_tls_start(xf__stream *s) {
  pthread_once(&bio_once, make_bio_method);
  BIO *b = bio_method ? BIO_new(bio_method) : NULL;
  if (!b || !(s->ssl = SSL_new(s->tls->ctx))) {
    BIO_free(b);
    ERR_clear_error();
    return xf__stream_fail(s, XF__SE_NOMEM, "out of memory for TLS to %s", s->peer);
  }
  BIO_set_data(b, s);
  BIO_set_init(b, 1);
  SSL_set_bio(s->ssl, b, b); /* s->ssl owns b now */
  SSL_set_connect_state(s->ssl);
  SSL_set_cert_cb(s->ssl, on_cert_request, s);
  if (!set_names(s)) {
    ERR_clear_error();
    return xf__stream_fail(s, XF__SE_CONFIG, "TLS: %s cannot be used as a server name",
                           s->name);
  }
  return xf__stream_tls_handshake(s);
}

/* The names the server's certificate is for (its subjectAltName entries, or
 * its common name), comma-separated into buf. */
static const char *cert_names(SSL *ssl, char *buf, size_t len) {
  STACK_OF(X509) *chain = SSL_get_peer_cert_chain(ssl); /* kept when verify failed */
  X509 *x = chain && sk_X509_num(chain) > 0 ? sk_X509_value(chain, 0) : NULL;
  snprintf(buf, len, "?");
  if (!x)
    return buf;
  GENERAL_NAMES *names = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
  size_t at = 0;
  buf[0] = '\0';
  for (int i = 0; names && i < sk_GENERAL_NAME_num(names) && at + 1 < len; i++) {
    const GENERAL_NAME *g = sk_GENERAL_NAME_value(names, i);
    char one[INET6_ADDRSTRLEN] = "";
    if (g->type == GEN_DNS) {
      snprintf(one, sizeof one, "%.*s", ASN1_STRING_length(g->d.dNSName),
               (const char *)ASN1_STRING_get0_data(g->d.dNSName));
    } else if (g->type == GEN_IPADD) {
      int n = ASN1_STRING_length(g->d.iPAddress);
      if (n == 4 || n == 16)
        inet_ntop(n == 4 ? AF_INET : AF_INET6, ASN1_STRING_get0_data(g->d.iPAddress), one,
                  sizeof one);
    }
    if (one[0])
      at += (size_t)snprintf(buf + at, len - at, "%s%s", at ? ", " : "", one);
  }
  GENERAL_NAMES_free(names);
  if (!at && X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, buf,
                                       (int)len) < 0)
    snprintf(buf, len, "?");
  return buf;
}

/* What the server sent instead of a TLS record, printable, for the message.
 * OpenSSL read only a record header (5 bytes): the rest of the line, if it
 * has come, is taken now (the stream has failed: nothing else reads it). */
static const char *shown(xf__stream *s, char *buf, size_t len) {
  char more[sizeof s->first];
  ssize_t n = recv(s->fd, more, sizeof more - s->nfirst, MSG_DONTWAIT);
  if (n > 0)
    xf__stream_note(s, more, (size_t)n);
  size_t at = 0;
  for (size_t i = 0; i < s->nfirst && at + 5 < len; i++) {
    unsigned char c = s->first[i];
    if (c == '\r' || c == '\n')
      break;
    at += (size_t)snprintf(buf + at, len - at, c >= 32 && c < 127 ? "%c" : "\\x%02x", c);
  }
  buf[at] = '\0';
  return buf;
}

static const char *ssl_reason(const xf__stream *s) {
  unsigned long e = ERR_peek_last_error();
  const char *r = e ? ERR_reason_error_string(e) : NULL;
  return r ? r : s->sys_errno ? strerror(s->sys_errno) : "unknown error";
}

static xf__io handshake_failed(xf__stream *s) {
  long v = SSL_get_verify_result(s->ssl);
  char buf[200];
  xf__io r;
  if (s->tls->verify &&
      (v == X509_V_ERR_HOSTNAME_MISMATCH || v == X509_V_ERR_IP_ADDRESS_MISMATCH))
    r = xf__stream_fail(s, XF__SE_CERT,
                        "TLS to %s: host name mismatch: certificate is for %s, wanted %s",
                        s->peer, cert_names(s->ssl, buf, sizeof buf), s->name);
  else if (s->tls->verify && v != X509_V_OK)
    r = xf__stream_fail(s, XF__SE_CERT, "TLS to %s: certificate not trusted: %s", s->peer,
                        X509_verify_cert_error_string(v));
  else if (s->got_bytes && (s->first[0] < 20 || s->first[0] > 23)) /* TLS record types */
    r = xf__stream_fail(s, XF__SE_TLS,
                        "TLS to %s: the server is not speaking TLS (it answered \"%s\")",
                        s->peer, shown(s, buf, sizeof buf));
  else if (s->cert_missing)
    r = xf__stream_fail(s, XF__SE_TLS,
                        "TLS to %s: the server requires a client certificate and none is "
                        "configured (mutual TLS): %s",
                        s->peer, s->peer_eof ? "connection closed" : ssl_reason(s));
  else if (s->peer_eof || s->sys_errno == ECONNRESET || s->sys_errno == EPIPE)
    r = xf__stream_fail(s, XF__SE_TLS,
                        "TLS to %s: the server closed the connection during the handshake",
                        s->peer);
  else
    r = xf__stream_fail(s, XF__SE_TLS, "TLS handshake with %s failed: %s", s->peer,
                        ssl_reason(s));
  ERR_clear_error();
  return r;
}

/* Empties the thread's OpenSSL error queue before an SSL call (SSL_get_error
 * reads it: a stale entry would turn WANT_READ into an error). The queue is
 * nearly always empty already, and emptying an empty one is not free in
 * OpenSSL 3 (ERR_clear_error walks its 16 slots: ~800 instructions, two
 * calls per hit); looking first costs a tenth of that. */
static void clear_errors(void) {
  if (ERR_peek_error())
    ERR_clear_error();
}

/* SSL_ERROR_WANT_READ / _WRITE: records it in s->want and answers AGAIN;
 * any other error: FAIL, for the caller to word. */
static xf__io want(xf__stream *s, int e) {
  if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)
    return XF__IO_FAIL;
  s->want = e == SSL_ERROR_WANT_READ ? XF__WANT_READ : XF__WANT_WRITE;
  return XF__IO_AGAIN;
}

xf__io xf__stream_tls_handshake(xf__stream *s) {
  clear_errors(); /* SSL_get_error reads the thread's queue */
  int rc = SSL_do_handshake(s->ssl);
  if (rc == 1) {
    s->state = XF__STREAM_OPEN;
    s->want = 0;
    s->handshakes++;
    __atomic_add_fetch(&s->tls->handshakes, 1, __ATOMIC_RELAXED);
    return XF__IO_DONE;
  }
  int e = SSL_get_error(s->ssl, rc);
  return want(s, e) == XF__IO_AGAIN ? XF__IO_AGAIN : handshake_failed(s);
}

/* ---- an open TLS stream --------------------------------------------------- */

/* Alerts a server sends when it refuses the client's certificate. */
static int refuses_client(unsigned long e) {
  int r = ERR_GET_REASON(e);
  return r == SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED ||
         r == SSL_R_TLSV1_ALERT_UNKNOWN_CA || r == SSL_R_SSLV3_ALERT_BAD_CERTIFICATE ||
         r == SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE ||
         r == SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN;
}

static xf__io io_failed(xf__stream *s, int e, const char *what) {
  xf__io r;
  unsigned long last = ERR_peek_last_error();
  int closed = e == SSL_ERROR_ZERO_RETURN ||
               (e == SSL_ERROR_SYSCALL &&
                (s->sys_errno == EPIPE || s->sys_errno == ECONNRESET || s->peer_eof));
  int refused = e == SSL_ERROR_SSL && refuses_client(last);
  if (s->cert_missing && !s->got_data && (closed || refused))
    r = xf__stream_fail(s, XF__SE_TLS,
                        "TLS to %s: the server requires a client certificate and none is "
                        "configured (mutual TLS): %s",
                        s->peer,
                        refused ? ERR_reason_error_string(last) : "connection closed");
  else if (refused)
    r = xf__stream_fail(s, XF__SE_TLS,
                        "TLS to %s: the server refused the client certificate: %s", s->peer,
                        ERR_reason_error_string(last));
  else if (closed)
    r = xf__stream_fail(s, XF__SE_CLOSED, "%s closed the connection", s->peer);
  else
    r = xf__stream_fail(s, XF__SE_IO, "TLS %s %s: %s", what, s->peer, ssl_reason(s));
  ERR_clear_error();
  return r;
}

xf__io xf__stream_tls_write(xf__stream *s, const void *buf, size_t len, size_t *put) {
  clear_errors();
  int n = SSL_write(s->ssl, buf, len > INT_MAX ? INT_MAX : (int)len);
  if (n > 0) {
    *put = (size_t)n;
    return XF__IO_DONE;
  }
  int e = SSL_get_error(s->ssl, n);
  return want(s, e) == XF__IO_AGAIN ? XF__IO_AGAIN : io_failed(s, e, "write to");
}

xf__io xf__stream_tls_read(xf__stream *s, void *buf, size_t cap, size_t *got) {
  clear_errors();
  int n = SSL_read(s->ssl, buf, cap > INT_MAX ? INT_MAX : (int)cap);
  if (n > 0) {
    s->got_data = 1;
    *got = (size_t)n;
    return XF__IO_DONE;
  }
  int e = SSL_get_error(s->ssl, n);
  return want(s, e) == XF__IO_AGAIN ? XF__IO_AGAIN : io_failed(s, e, "read from");
}

void xf__stream_tls_end(xf__stream *s, int notify) {
  if (notify)
    SSL_shutdown(s->ssl); /* one non-blocking try: queued or dropped, never awaited */
  SSL_free(s->ssl);       /* and the BIO */
  s->ssl = NULL;
  ERR_clear_error();
}

int xf__stream_pending(const xf__stream *s) { return s->ssl && SSL_has_pending(s->ssl); }
