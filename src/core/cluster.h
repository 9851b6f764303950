/* Redis Cluster routing without I/O: key -> slot (CRC16 + hash tags), the
 * slot map parsed from CLUSTER SLOTS, and what to do with MOVED / ASK /
 * TRYAGAIN / CLUSTERDOWN replies. No sockets, no clock, no threads: every
 * driver (blocking, batch, async) calls the same functions. A map is not
 * thread-safe; its owner serialises access. */
#ifndef XF_CLUSTER_H
#define XF_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include "reply.h"

struct xf_reply;

#define XF_CLUSTER_SLOTS 16384
/* Redirections (MOVED, ASK) and retries (TRYAGAIN, CLUSTERDOWN) one command
 * may follow before the call fails: ends loops between confused nodes. */
#define XF_CLUSTER_MAX_REDIRECTS 5
/* Longest host name a redirection or the map carries (RFC 1035: 253). */
#define XF_CLUSTER_HOST_MAX 256

/* CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0, no reflection),
 * the checksum Redis Cluster hashes keys with. */
uint16_t xf__crc16(const char *buf, size_t len);

/* The slot (0..16383) of a key, with the spec's hash tags: if the key has a
 * '{' followed later by a '}' with at least one byte between them, only the
 * bytes between the first '{' and the first '}' after it are hashed. */
int xf__cluster_keyslot(const char *key, size_t len);

/* A node of the map: a master or a replica, known by its endpoint. */
typedef struct xf__cluster_node {
  char *host; /* owned; the preferred endpoint (IP or host name) */
  int port;
  char *id;   /* owned; the node id, NULL when the reply had none */
  int master; /* index of its master in nodes[]; -1 for a master */
} xf__cluster_node;

/* Which master serves each slot, and every node seen. */
typedef struct xf__cluster_map {
  xf__cluster_node *nodes;
  int nnodes, cap;
  int16_t slots[XF_CLUSTER_SLOTS]; /* index in nodes[] of the master; -1 = none */
} xf__cluster_map;

/* An empty map: no nodes, no slot covered. */
void xf__cluster_map_init(xf__cluster_map *m);

/* Frees the nodes and leaves m empty (as after init); NULL-safe. */
void xf__cluster_map_free(xf__cluster_map *m);

/* Builds *m (initialised or freed before; replaced on success) from a
 * CLUSTER SLOTS reply, Redis 7 shape: an array of
 * [start, end, [host, port, id, metadata...], replicas as [host, port, id...]...].
 * A NULL or empty host means "the node the command was sent to" and becomes
 * seed_host; a "?" host (endpoint not known yet) leaves a master's slots
 * uncovered and drops a replica. Returns 0 (XF_OK), XF_EPROTO with a message
 * in err (m left empty) when the reply has another shape, a slot range out of
 * bounds or claimed twice, or XF_ENOMEM. Slots no range names stay -1: the
 * caller checks xf__cluster_map_covered(). */
int xf__cluster_map_parse(xf__cluster_map *m, const struct xf_reply *r,
                          const char *seed_host, char *err, size_t errlen);

/* Index in nodes[] of the master serving slot, or -1 (unknown or bad slot). */
int xf__cluster_map_master(const xf__cluster_map *m, int slot);

/* Index in nodes[] of the node at host:port, or -1. */
int xf__cluster_map_find(const xf__cluster_map *m, const char *host, int port);

/* How many slots have a master: XF_CLUSTER_SLOTS when the map is complete. */
int xf__cluster_map_covered(const xf__cluster_map *m);

/* The replicas of master: writes up to max indexes in nodes[] to out and
 * returns how many master has (may exceed max). */
int xf__cluster_map_replicas(const xf__cluster_map *m, int master, int *out, int max);

/* Records that slot now lives on host:port (what a MOVED says), adding the
 * node as a master if the map does not know it. Returns its index, XF_EINVAL
 * (bad slot, port or host) or XF_ENOMEM. */
int xf__cluster_map_set_slot(xf__cluster_map *m, int slot, const char *host, int port);

/* What a reply asks the router to do. */
typedef enum xf__cluster_kind {
  XF_CLUSTER_REPLY = 0, /* not a cluster redirection: the caller handles the reply */
  XF_CLUSTER_MOVED, /* the slot lives on host:port for good: update the map, retry there */
  XF_CLUSTER_ASK, /* the slot is migrating: ASKING then retry on host:port, map unchanged */
  XF_CLUSTER_TRYAGAIN, /* keys of the slot are mid-migration: back off, retry */
  XF_CLUSTER_DOWN      /* CLUSTERDOWN: back off, refresh the map, retry */
} xf__cluster_kind;

/* A parsed redirection; slot, host and port are set for MOVED and ASK only. */
typedef struct xf__cluster_redirect {
  xf__cluster_kind kind;
  int slot; /* -1 when not a MOVED / ASK */
  int port;
  char host[XF_CLUSTER_HOST_MAX]; /* "" = the host of the node that replied */
} xf__cluster_redirect;

/* Classifies an error reply's text (msg, len: xf__reply str/len, without the
 * leading '-'). Anything that is not MOVED / ASK / TRYAGAIN / CLUSTERDOWN is
 * XF_CLUSTER_REPLY. Returns 0, or XF_EPROTO for a MOVED or ASK it cannot parse
 * (out->kind is then XF_CLUSTER_REPLY). */
int xf__cluster_redirect_parse(const char *msg, size_t len, xf__cluster_redirect *out);

/* How long to wait before following decision kind on the attempt-th
 * redirection of one command (attempt counts from 1): 0 for MOVED / ASK, a
 * bounded backoff (ms) for TRYAGAIN / CLUSTERDOWN, and -1 once attempt is
 * past XF_CLUSTER_MAX_REDIRECTS or for XF_CLUSTER_REPLY: stop and fail. */
int xf__cluster_retry_delay_ms(xf__cluster_kind kind, int attempt);

/* Reads the text of INFO cluster (or a full INFO): 1 when cluster_enabled:1,
 * 0 when cluster_enabled:0, XF_EPROTO when the field is missing or garbled. */
int xf__cluster_info_enabled(const char *info, size_t len);

#endif
