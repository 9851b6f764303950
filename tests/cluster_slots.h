/* Test helpers on the binary's shared cluster (cluster_fixture.h): which
 * master serves a slot, moving a slot or one key by hand (as redis-cli
 * --cluster reshard does), and the commands each node ran (INFO
 * commandstats). */
#ifndef XF_TEST_CLUSTER_SLOTS_H
#define XF_TEST_CLUSTER_SLOTS_H

#include <hiredis/hiredis.h>

/* A master, by port and node id. */
typedef struct xft_node {
  int port;
  char id[41];
} xft_node;

struct xf_reply;

/* The CLUSTER SLOTS reply of the node at port, built by the library's reader
 * for the core's parser (free with xf__reply_free). */
struct xf_reply *xft_cluster_slots(int port);

/* The master serving slot, and another master. */
void xft_masters_of(int slot, xft_node *owner, xft_node *other);

/* Expects an OK status reply, and frees it. */
void xft_expect_ok(redisReply *rep);

/* Tells every master that slot now lives on to. */
void xft_assign(int slot, const xft_node *to);

/* Starts moving slot from -> to (IMPORTING, MIGRATING: both may repeat) and
 * moves key over. */
void xft_migrate_key(int slot, const xft_node *from, const xft_node *to, const char *key);

/* Commands the node at port ran since its last CONFIG RESETSTAT, by name
 * ("evalsha_ro", "cluster|slots"). */
long long xft_calls_of(int port, const char *cmd);

/* Error replies of a kind ("CLUSTERDOWN") the node at port gave since its
 * last CONFIG RESETSTAT (INFO errorstats). */
long long xft_errors_of(int port, const char *error);

/* CONFIG RESETSTAT on every node. */
void xft_reset_stats(void);

/* xft_calls_of summed over every node. */
long long xft_total_calls(const char *cmd);

/* The options.entry_format of the cluster tests' clients: XFT_ENTRY_FORMAT
 * (as fixture.h's; unset: 0, the default, format 2). */
int xft_cluster_entry_format(void);

/* The command a hit's plain read is for that format, by name: "get" (format
 * 2), "hmget" (format 1). The read script reads an entry with it too. */
const char *xft_cluster_read_cmd(void);

#endif
