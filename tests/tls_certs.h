/* A throwaway CA and certificates made by the openssl CLI in a temp dir
 * (tls_certs.c): the TLS test fixture's (tls_fixture.h) and xfetch-bench's. */
#ifndef XF_TEST_TLS_CERTS_H
#define XF_TEST_TLS_CERTS_H

#include <stddef.h>

/* The files made in the certificate dir (PEM; keys unencrypted):
 *   ca.crt/key        the CA every server and client cert is signed by
 *   other-ca.crt/key  a CA that signed nothing here ("not trusted")
 *   server.crt/key    CN localhost, SAN DNS:localhost, IP:127.0.0.1, IP:::1
 *   wrong.crt/key     CN and SAN DNS:wrong.example ("name mismatch")
 *   client.crt/key    CN xft-client, clientAuth (mutual TLS) */

/* Makes the certificates in a new temp dir (its path into dir). 0 or -1. */
int xft_tls_make_certs(char *dir, size_t len);
void xft_tls_remove_certs(const char *dir);

#endif
