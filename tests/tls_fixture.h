/* TLS test fixtures: a throwaway CA and certificates made by the openssl CLI
 * in a temp dir, and redis-servers listening with --tls-port. A binary that
 * links tls_fixture.c gets, before its tests (Criterion PRE_ALL), the
 * certificates and two shared servers: one that accepts any TLS client, one
 * with --tls-auth-clients yes (mutual TLS). Both also keep a plain port,
 * which the fixture uses to see them up (and tests use as "not TLS"). */
#ifndef XF_TEST_TLS_FIXTURE_H
#define XF_TEST_TLS_FIXTURE_H

#include "fixture.h"
#include "tls_certs.h"

/* Starts redis-server with TLS on a free port (*tls_port) presenting
 * <certdir>/<cert>.crt, trusting ca.crt for client certs, demanding one
 * when auth_clients. 0 or -1; stop with xft_server_stop. */
int xft_tls_server_start(xft_server *s, int *tls_port, const char *certdir,
                         const char *cert, int auth_clients);

/* The shared fixture, in any Criterion worker: "<certdir>/<name>", in one of
 * 8 static buffers used in turn (enough for one test's TLS config). */
const char *xft_tls_file(const char *name);
int xft_tls_port(void);       /* TLS, any client */
int xft_tls_plain_port(void); /* the same server's plain port */
int xft_mtls_port(void);      /* TLS, client certificate required */

#endif
