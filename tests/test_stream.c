/* The stream (src/stream.h) against real redis-servers: plain, TLS, mutual
 * TLS; replies parsed by hiredis' redisReader, as the library parses them. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "stream.h"
#include "tls_fixture.h"

#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

#define DEADLINE_MS 2000
/* "Fails fast": well under the deadline; valgrind runs TLS 20-50 times slower. */
#define QUICK_MS (RUNNING_ON_VALGRIND ? 5000 : 1000)

static xf__tls *tls_with(const char *ca_file, const char *cert, const char *key,
                         const char *server_name, int no_verify) {
  xf__tls_config cfg = {.enable = 1,
                        .ca_file = ca_file,
                        .cert_file = cert,
                        .key_file = key,
                        .server_name = server_name,
                        .no_verify = no_verify};
  xf__tls *t = NULL;
  char err[256];
  int rc = xf__tls_new(&t, &cfg, err, sizeof err);
  cr_assert_eq(rc, XF_OK, "xf__tls_new: %s", err);
  return t;
}

static xf__tls *tls_trusting(const char *ca) {
  return tls_with(xft_tls_file(ca), NULL, NULL, NULL, 0);
}

/* Opens s to host:port and connects within ms; the code. */
static int connect_to(xf__stream *s, const char *host, int port, xf__tls *tls, int ms) {
  int64_t deadline = xf__stream_now_ms() + ms;
  xf__stream_init(s);
  xf__stream_open_tcp(s, host, port, tls);
  return xf__stream_connect_blocking(s, deadline);
}

/* Sends an encoded command and reads its reply (NULL when the stream failed:
 * s->errstr says why). */
static redisReply *roundtrip(xf__stream *s, const char *cmd, size_t len) {
  int64_t deadline = xf__stream_now_ms() + DEADLINE_MS;
  if (xf__stream_write_all(s, cmd, len, deadline) != XF_OK)
    return NULL;
  redisReader *rd = redisReaderCreate();
  void *reply = NULL;
  char buf[16384];
  while (!reply) {
    size_t got;
    if (xf__stream_read_some(s, buf, sizeof buf, &got, deadline) != XF_OK)
      break;
    cr_assert_eq(redisReaderFeed(rd, buf, got), REDIS_OK);
    cr_assert_eq(redisReaderGetReply(rd, &reply), REDIS_OK);
  }
  redisReaderFree(rd);
  return reply;
}

#define PING "*1\r\n$4\r\nPING\r\n"

static void assert_pong(xf__stream *s) {
  redisReply *r = roundtrip(s, PING, strlen(PING));
  cr_assert_not_null(r, "PING: %s", s->errstr);
  cr_assert_eq(r->type, REDIS_REPLY_STATUS);
  cr_assert_str_eq(r->str, "PONG");
  freeReplyObject(r);
}

Test(stream, tls_handshake_then_ping_answers_pong) {
  xf__tls *t = tls_trusting("ca.crt");
  xf__stream s;
  cr_assert_eq(connect_to(&s, "127.0.0.1", xft_tls_port(), t, DEADLINE_MS), XF_OK, "%s",
               s.errstr);
  cr_assert_eq(s.state, XF__STREAM_OPEN);
  cr_assert_not_null(s.ssl);
  assert_pong(&s);
  xf__stream_close(&s);
  xf__tls_free(t);
}

Test(stream, localhost_is_verified_by_its_dns_name) {
  xf__tls *t = tls_trusting("ca.crt"); /* "localhost" may be ::1 first: refused, next */
  xf__stream s;
  cr_assert_eq(connect_to(&s, "localhost", xft_tls_port(), t, DEADLINE_MS), XF_OK, "%s",
               s.errstr);
  assert_pong(&s);
  xf__stream_close(&s);
  xf__tls_free(t);
}

Test(stream, plain_tcp_and_unix_streams_answer_pong) {
  xf__stream s;
  cr_assert_eq(connect_to(&s, "127.0.0.1", xft_port(), NULL, DEADLINE_MS), XF_OK);
  cr_assert_null(s.ssl);
  assert_pong(&s);
  xf__stream_close(&s);
  xf__stream_init(&s);
  xf__stream_open_unix(&s, xft_unix_path(), NULL);
  cr_assert_eq(xf__stream_connect_blocking(&s, xf__stream_now_ms() + DEADLINE_MS), XF_OK,
               "%s", s.errstr);
  assert_pong(&s);
  xf__stream_close(&s);
}

Test(stream, a_wrong_ca_is_not_trusted_at_once) {
  xf__tls *t = tls_trusting("other-ca.crt");
  xf__stream s;
  int64_t t0 = xf__stream_now_ms();
  cr_assert_eq(connect_to(&s, "127.0.0.1", xft_tls_port(), t, DEADLINE_MS), XF_ETLS);
  cr_assert_lt(xf__stream_now_ms() - t0, QUICK_MS);
  cr_assert_eq(s.err, XF__SE_CERT);
  /* Redis sends its CA along: a chain that ends in a root we do not trust. */
  cr_assert(strstr(s.errstr, "certificate not trusted: self-signed certificate in "
                             "certificate chain"),
            "%s", s.errstr);
  cr_assert_eq(xf__tls_handshakes(t), 0);
  xf__stream_close(&s);
  xf__tls_free(t);
}

Test(stream, a_wrong_server_name_is_a_name_mismatch) {
  xf__tls *t = tls_with(xft_tls_file("ca.crt"), NULL, NULL, "wrong.example", 0);
  xf__stream s;
  cr_assert_eq(connect_to(&s, "127.0.0.1", xft_tls_port(), t, DEADLINE_MS), XF_ETLS);
  cr_assert_eq(s.err, XF__SE_CERT);
  cr_assert(strstr(s.errstr, "host name mismatch: certificate is for localhost, 127.0.0.1, "
                             "::1, wanted wrong.example"),
            "%s", s.errstr);
  xf__stream_close(&s);
  xf__tls_free(t);
}

Test(stream, a_certificate_for_another_name_is_a_name_mismatch) {
  char dir[64];
  xft_server srv;
  int port;
  cr_assert_eq(xft_tls_make_certs(dir, sizeof dir), 0);
  cr_assert_eq(xft_tls_server_start(&srv, &port, dir, "wrong", 0), 0);
  char ca[128];
  snprintf(ca, sizeof ca, "%s/ca.crt", dir);
  xf__tls *t = tls_with(ca, NULL, NULL, NULL, 0);
  xf__stream s;
  int rc = connect_to(&s, "127.0.0.1", port, t, DEADLINE_MS);
  xft_server_stop(&srv);
  xft_tls_remove_certs(dir);
  cr_assert_eq(rc, XF_ETLS);
  cr_assert(strstr(s.errstr, "certificate is for wrong.example, wanted 127.0.0.1"), "%s",
            s.errstr);
  xf__stream_close(&s);
  xf__tls_free(t);
}

Test(stream, verification_off_accepts_an_untrusted_certificate) {
  xf__tls *t = tls_with(xft_tls_file("other-ca.crt"), NULL, NULL, "wrong.example", 1);
  xf__stream s;
  cr_assert_eq(connect_to(&s, "127.0.0.1", xft_tls_port(), t, DEADLINE_MS), XF_OK, "%s",
               s.errstr);
  assert_pong(&s);
  xf__stream_close(&s);
  xf__tls_free(t);
}

Test(stream, plain_text_to_a_tls_port_fails_fast_and_says_tls) {
  xf__stream s;
  int64_t t0 = xf__stream_now_ms();
  cr_assert_eq(connect_to(&s, "127.0.0.1", xft_tls_port(), NULL, DEADLINE_MS), XF_OK);
  cr_assert_null(roundtrip(&s, PING, strlen(PING)));
  cr_assert_lt(xf__stream_now_ms() - t0, QUICK_MS, "not a hang");
  cr_assert_eq(s.err, XF__SE_CLOSED);
  cr_assert_eq(xf__stream_code(&s), XF_EIO);
  cr_assert(strstr(s.errstr, "before answering (if it is a TLS port, connect with TLS"),
            "%s", s.errstr);
  xf__stream_close(&s);
}

Test(stream, tls_to_a_plain_redis_port_times_out_with_a_hint) {
  /* Redis' inline parser stops at the hello's first NUL byte and waits for a
   * newline: a plain Redis never answers a TLS hello. */
  xf__tls *t = tls_trusting("ca.crt");
  xf__stream s;
  int64_t t0 = xf__stream_now_ms();
  cr_assert_eq(connect_to(&s, "127.0.0.1", xft_tls_plain_port(), t, 300), XF_ETLS);
  cr_assert_lt(xf__stream_now_ms() - t0, QUICK_MS);
  cr_assert_eq(s.err, XF__SE_TLS);
  cr_assert_geq(xf__stream_now_ms() - t0, 299, "waited for the deadline");
  cr_assert(strstr(s.errstr, "TLS handshake with 127.0.0.1:") &&
                strstr(s.errstr, " timed out after "), /* the deadline less the open */
            "%s", s.errstr);
  cr_assert(strstr(s.errstr, " ms (the server sent nothing back: is it a plain, non-TLS "
                             "port?)"),
            "%s", s.errstr);
  xf__stream_close(&s);
  xf__tls_free(t);
}

/* A server that answers anything in plain RESP, as a proxy or an old server
 * might: one connection, one error line. */
static void *plain_answerer(void *arg) {
  int lfd = *(int *)arg;
  int fd = accept(lfd, NULL, NULL);
  char buf[512];
  if (fd >= 0 && recv(fd, buf, sizeof buf, 0) > 0)
    send(fd, "-ERR unknown command\r\n", 22, MSG_NOSIGNAL);
  if (fd >= 0)
    close(fd);
  return NULL;
}

Test(stream, tls_to_a_plain_text_answer_is_not_speaking_tls) {
  int port;
  int lfd = xft_listen_loopback(1, &port);
  xf__tls *t = tls_trusting("ca.crt"); /* (asserted) before the answerer runs */
  pthread_t th;
  pthread_create(&th, NULL, plain_answerer, &lfd);
  xf__stream s;
  int64_t t0 = xf__stream_now_ms();
  int rc = connect_to(&s, "127.0.0.1", port, t, DEADLINE_MS);
  pthread_join(th, NULL);
  close(lfd);
  cr_assert_eq(rc, XF_ETLS);
  cr_assert_lt(xf__stream_now_ms() - t0, QUICK_MS);
  cr_assert(strstr(s.errstr, "the server is not speaking TLS (it answered \"-ERR unknown "
                             "command\")"),
            "%s", s.errstr);
  xf__stream_close(&s);
  xf__tls_free(t);
}

Test(stream, mutual_tls_with_a_client_certificate_answers) {
  xf__tls *t = tls_with(xft_tls_file("ca.crt"), xft_tls_file("client.crt"),
                        xft_tls_file("client.key"), NULL, 0);
  xf__stream s;
  cr_assert_eq(connect_to(&s, "127.0.0.1", xft_mtls_port(), t, DEADLINE_MS), XF_OK, "%s",
               s.errstr);
  assert_pong(&s);
  xf__stream_close(&s);
  xf__tls_free(t);
}

Test(stream, mutual_tls_without_a_client_certificate_is_refused_clearly) {
  xf__tls *t = tls_trusting("ca.crt");
  xf__stream s;
  int64_t t0 = xf__stream_now_ms();
  /* TLS 1.3: the client's handshake ends before the server judges it; the
   * refusal (an alert) comes with the first read. */
  int rc = connect_to(&s, "127.0.0.1", xft_mtls_port(), t, DEADLINE_MS);
  cr_assert_eq(s.handshakes, rc == XF_OK);
  if (rc == XF_OK)
    cr_assert_null(roundtrip(&s, PING, strlen(PING)));
  cr_assert_lt(xf__stream_now_ms() - t0, QUICK_MS);
  cr_assert_eq(s.err, XF__SE_TLS, "%d: %s", s.err, s.errstr);
  cr_assert_eq(xf__stream_code(&s), XF_ETLS);
  /* The alert ("tlsv13 alert certificate required"), or a reset that beat
   * it (the server closed with our PING unread): either way, said plainly. */
  cr_assert(strstr(s.errstr, "the server requires a client certificate and none is "
                             "configured (mutual TLS)"),
            "%s", s.errstr);
  xf__stream_close(&s);
  xf__tls_free(t);
}

/* Writes all of buf the way an event loop would: the non-blocking write,
 * then a wait for what the stream wants. Counts both. */
static void write_evented(xf__stream *s, const char *buf, size_t len, int *writes,
                          int *agains) {
  while (len > 0) {
    size_t put;
    xf__io r = xf__stream_write(s, buf, len, &put);
    cr_assert_neq(r, XF__IO_FAIL, "%s", s->errstr);
    if (r == XF__IO_AGAIN) {
      ++*agains;
      struct pollfd p = {s->fd, s->want & XF__WANT_READ ? POLLIN : POLLOUT, 0};
      cr_assert_eq(poll(&p, 1, DEADLINE_MS), 1, "stuck wanting %d", s->want);
      continue;
    }
    ++*writes;
    buf += put;
    len -= put;
  }
}

/* Reads one reply the way an event loop would: read until AGAIN, then wait
 * for what the stream wants. */
static redisReply *read_evented(xf__stream *s, int *reads, int *agains) {
  redisReader *rd = redisReaderCreate();
  void *reply = NULL;
  char buf[16384];
  while (!reply) {
    size_t got;
    xf__io r = xf__stream_read(s, buf, sizeof buf, &got);
    cr_assert_neq(r, XF__IO_FAIL, "%s", s->errstr);
    if (r == XF__IO_AGAIN) {
      ++*agains;
      struct pollfd p = {s->fd, s->want & XF__WANT_WRITE ? POLLOUT : POLLIN, 0};
      cr_assert_eq(poll(&p, 1, DEADLINE_MS), 1, "stuck wanting %d", s->want);
      continue;
    }
    ++*reads;
    cr_assert_eq(redisReaderFeed(rd, buf, got), REDIS_OK);
    cr_assert_eq(redisReaderGetReply(rd, &reply), REDIS_OK);
  }
  redisReaderFree(rd);
  return reply;
}

Test(stream, a_mebibyte_set_and_get_crosses_partial_writes_and_reads) {
  xf__tls *t = tls_trusting("ca.crt");
  xf__stream s;
  cr_assert_eq(connect_to(&s, "127.0.0.1", xft_tls_port(), t, DEADLINE_MS), XF_OK);
  /* A small send buffer: TLS records must wait for room. (Not the receive
   * buffer: shrunk after the handshake, Linux drops what the advertised
   * window already allowed, and retransmits slowly.) */
  int small = 8192;
  setsockopt(s.fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  size_t n = 1 << 20;
  char *v = malloc(n);
  for (size_t i = 0; i < n; i++)
    v[i] = (char)('a' + i * 7 % 26);
  char *cmd;
  int len = redisFormatCommand(&cmd, "SET stream:big %b", v, n);
  int writes = 0, agains = 0;
  write_evented(&s, cmd, (size_t)len, &writes, &agains);
  cr_assert_gt(writes, 1, "partial writes");
  cr_assert_gt(agains, 0, "WANT_WRITE waits");
  redisFreeCommand(cmd);
  redisReply *r = roundtrip(&s, "", 0); /* SET's reply */
  cr_assert(r && r->type == REDIS_REPLY_STATUS, "%s", s.errstr);
  freeReplyObject(r);
  const char get[] = "*2\r\n$3\r\nGET\r\n$10\r\nstream:big\r\n";
  write_evented(&s, get, strlen(get), &writes, &agains);
  int reads = 0;
  r = read_evented(&s, &reads, &agains);
  cr_assert_geq(reads, (int)(n / 16384), "one TLS record (16 KiB) per read at most");
  cr_assert_eq(r->type, REDIS_REPLY_STRING);
  cr_assert_eq(r->len, n);
  cr_assert(memcmp(r->str, v, n) == 0);
  freeReplyObject(r);
  free(v);
  xf__stream_close(&s);
  xf__tls_free(t);
}

Test(stream, one_handshake_per_connection_not_per_command) {
  xf__tls *t = tls_trusting("ca.crt");
  xf__stream s[3];
  for (int i = 0; i < 3; i++) {
    cr_assert_eq(connect_to(&s[i], "127.0.0.1", xft_tls_port(), t, DEADLINE_MS), XF_OK);
    for (int k = 0; k < 5; k++)
      assert_pong(&s[i]);
    cr_assert_eq(s[i].handshakes, 1);
  }
  cr_assert_eq(xf__tls_handshakes(t), 3);
  xf__stream_close(&s[0]); /* reopened: its count goes on */
  xf__stream_open_tcp(&s[0], "127.0.0.1", xft_tls_port(), t);
  cr_assert_eq(xf__stream_connect_blocking(&s[0], xf__stream_now_ms() + DEADLINE_MS),
               XF_OK);
  assert_pong(&s[0]);
  cr_assert_eq(s[0].handshakes, 2);
  cr_assert_eq(xf__tls_handshakes(t), 4);
  for (int i = 0; i < 3; i++)
    xf__stream_close(&s[i]);
  xf__tls_free(t);
}

/* A reply read over TLS as the connection reads it (xf__stream_read_sliced:
 * wait, then read) costs one recv (OpenSSL reads ahead: the record's header
 * and body together), as over plain TCP, not two. */
Test(stream, a_tls_reply_costs_one_recv_as_a_plain_one) {
  xf__tls *t = tls_trusting("ca.crt");
  xf__stream s;
  cr_assert_eq(connect_to(&s, "127.0.0.1", xft_tls_port(), t, DEADLINE_MS), XF_OK);
  assert_pong(&s); /* and TLS 1.3's session tickets, sent after the handshake */
  unsigned before = s.recvs;
  for (int k = 0; k < 10; k++) {
    int64_t deadline = 0;
    cr_assert_eq(xf__stream_write_all(&s, PING, strlen(PING), xf__stream_now_ms() + 5000),
                 XF_OK);
    char buf[64];
    size_t got = 0, have = 0;
    while (have < 7) { /* +PONG\r\n */
      cr_assert_eq(xf__stream_read_sliced(&s, buf + have, sizeof buf - have, &got,
                                          &deadline, DEADLINE_MS, NULL, NULL, 50),
                   XF_OK, "%s", s.errstr);
      have += got;
    }
    cr_assert_eq(memcmp(buf, "+PONG\r\n", 7), 0);
  }
  cr_assert_leq(s.recvs - before, 12, "%u recv calls for 10 replies", s.recvs - before);
  xf__stream_close(&s);
  xf__tls_free(t);
}

Test(stream, a_port_nobody_listens_on_is_refused) {
  int fd = socket(AF_INET, SOCK_STREAM, 0); /* bound, not listening: refused */
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t alen = sizeof a;
  cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
  xf__stream s;
  cr_assert_eq(connect_to(&s, "127.0.0.1", ntohs(a.sin_port), NULL, DEADLINE_MS),
               XF_ECONNECT);
  close(fd);
  cr_assert_eq(s.err, XF__SE_CONNECT);
  cr_assert(strstr(s.errstr, "Connection refused"), "%s", s.errstr);
  xf__stream_close(&s);
}

Test(stream, tls_files_that_cannot_be_used_are_invalid_arguments) {
  xf__tls *t = NULL;
  char err[256];
  xf__tls_config cfg = {.enable = 1, .ca_file = "/nonexistent/ca.crt"};
  cr_assert_eq(xf__tls_new(&t, &cfg, err, sizeof err), XF_EINVAL);
  cr_assert_null(t);
  cr_assert(strstr(err, "TLS CA file /nonexistent/ca.crt cannot be loaded"), "%s", err);
  cfg = (xf__tls_config){.enable = 1,
                         .cert_file = xft_tls_file("client.crt"),
                         .key_file = xft_tls_file("server.key")};
  cr_assert_eq(xf__tls_new(&t, &cfg, err, sizeof err), XF_EINVAL);
  cr_assert(strstr(err, "server.key cannot be loaded: key values mismatch"), "%s", err);
}

Test(stream, tls_on_a_unix_socket_needs_a_name_to_verify) {
  xf__tls *t = tls_trusting("ca.crt");
  xf__stream s;
  xf__stream_init(&s);
  cr_assert_eq(xf__stream_open_unix(&s, xft_unix_path(), t), XF__IO_FAIL);
  cr_assert_eq(xf__stream_code(&s), XF_EINVAL);
  cr_assert(strstr(s.errstr, "needs a server name"), "%s", s.errstr);
  xf__stream_close(&s);
  xf__tls_free(t);
}
