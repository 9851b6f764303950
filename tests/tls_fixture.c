/* (tls_fixture.h) TLS redis-servers on tls_certs.c's certificates. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tls_fixture.h"

int xft_tls_server_start(xft_server *s, int *tls_port, const char *certdir,
                         const char *cert, int auth_clients) {
  char port[16], crt[300], key[300], ca[300];
  snprintf(crt, sizeof crt, "%s/%s.crt", certdir, cert);
  snprintf(key, sizeof key, "%s/%s.key", certdir, cert);
  snprintf(ca, sizeof ca, "%s/ca.crt", certdir);
  /* A TLS port someone took meanwhile kills the server: another port then. */
  for (int attempt = 0; attempt < 5; attempt++) {
    *tls_port = xft_free_port();
    snprintf(port, sizeof port, "%d", *tls_port);
    const char *extra[] = {"--tls-port",
                           port,
                           "--tls-cert-file",
                           crt,
                           "--tls-key-file",
                           key,
                           "--tls-ca-cert-file",
                           ca,
                           "--tls-auth-clients",
                           auth_clients ? "yes" : "no",
                           NULL};
    if (xft_server_start(s, extra) == 0)
      return 0;
    xft_server_stop(s);
  }
  return -1;
}

/* ---- the binary's shared TLS servers ---------------------------------------- */

static char cert_dir[64];
static xft_server tls_server, mtls_server;

static void export_port(const char *name, int port) {
  char v[16];
  snprintf(v, sizeof v, "%d", port);
  setenv(name, v, 1);
}

ReportHook(PRE_ALL)(struct criterion_test_set *set) {
  (void)set;
  int port = 0;
  if (xft_tls_make_certs(cert_dir, sizeof cert_dir) != 0 ||
      xft_tls_server_start(&tls_server, &port, cert_dir, "server", 0) != 0) {
    fprintf(stderr, "tls fixture: cannot start a TLS redis-server\n");
    exit(1);
  }
  export_port("XFT_TLS_PORT", port);
  export_port("XFT_TLS_PLAIN_PORT", tls_server.port);
  if (xft_tls_server_start(&mtls_server, &port, cert_dir, "server", 1) != 0) {
    fprintf(stderr, "tls fixture: cannot start a mutual-TLS redis-server\n");
    exit(1);
  }
  export_port("XFT_MTLS_PORT", port);
  setenv("XFT_TLS_DIR", cert_dir, 1); /* Criterion's workers are new processes */
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats) {
  (void)stats;
  xft_server_stop(&tls_server);
  xft_server_stop(&mtls_server);
  xft_tls_remove_certs(cert_dir);
}

static int env_port(const char *name) {
  const char *v = getenv(name);
  cr_assert_not_null(v, "no shared TLS redis-server (%s unset)", name);
  return atoi(v);
}

int xft_tls_port(void) { return env_port("XFT_TLS_PORT"); }
int xft_tls_plain_port(void) { return env_port("XFT_TLS_PLAIN_PORT"); }
int xft_mtls_port(void) { return env_port("XFT_MTLS_PORT"); }

const char *xft_tls_file(const char *name) {
  static char ring[8][300];
  static int next;
  const char *dir = getenv("XFT_TLS_DIR");
  cr_assert_not_null(dir, "no TLS certificates (XFT_TLS_DIR unset)");
  char *buf = ring[next++ % 8];
  snprintf(buf, sizeof ring[0], "%s/%s", dir, name);
  return buf;
}
