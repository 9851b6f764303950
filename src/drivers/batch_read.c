/* The batch driver's first round when the reads are scripts (a client
 * whose clock estimate must be learned or refreshed: clock.h): every key's
 * read in one read_many call (lua/read_many.lua), so that n reads cost one
 * script run on the server instead of n. Each flow is then fed its own part
 * of the reply, exactly as if its own read had answered. In Redis Cluster a
 * script's keys must share a slot: the keys go in one call per slot. Plain
 * reads of format-2 entries (the hit path, every clock fresh) go the same
 * way as one MGET per group (a hash among them reads as nil: its flow asks
 * for the lease, whose script reads both formats). Plain HMGETs (format 1)
 * need none of this: send_all pipelines them. */
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "client_io.h"
#include "cluster.h"
#include "entry.h"
#include "flow_steps.h"
#include "reply.h"
#include "script.h"

/* A read_many call runs its keys in one go on the server: bound how long
 * that keeps Redis from everyone else. */
#define READ_MANY_MAX_KEYS 512

/* Whether the keys of one call must share a slot (Redis Cluster). Before the
 * first command the client may not know yet (options.cluster auto): grouping
 * by slot is right either way. */
static int one_slot_only(const xf_client *c) {
  return c->routes.mode != XF_ROUTE_STANDALONE;
}

typedef struct keyed {
  int slot;
  size_t flow;
} keyed;

static int by_slot(const void *pa, const void *pb) {
  const keyed *a = pa, *b = pb;
  if (a->slot != b->slot)
    return a->slot < b->slot ? -1 : 1;
  return a->flow < b->flow ? -1 : a->flow > b->flow;
}

/* How many keys a flow's read may carry: its entry's, its tags'. */
#define TAG_SLOTS (XF_MAX_TAGS + 1)

/* Whether flow i's read goes in a group's command: any first read but one
 * that carries its tags' keys, which goes in a plain MGET on one node only
 * (read_many takes entries only, and in Redis Cluster a tag's key is in a
 * slot of its own): else it sends its own, in the same round trip. */
static int groupable(batch *b, size_t i, int plain) {
  const char *const *keys;
  const size_t *lens;
  if (b->steps[i] != XF_STEP_SEND || b->flows[i].state != XF__READ)
    return 0; /* a tagged flow that reads its tags apart reads them first */
  if (!xf__flow_tags_in_read(&b->flows[i], &keys, &lens))
    return 1;
  if (!plain || one_slot_only(b->c))
    return 0;
  if (!b->read_keys) {
    b->read_keys = malloc(b->n * (TAG_SLOTS + 1) * sizeof *b->read_keys);
    b->read_lens = malloc(b->n * (TAG_SLOTS + 1) * sizeof *b->read_lens);
    b->tag_at = malloc(b->n * TAG_SLOTS * sizeof *b->tag_at);
  }
  return b->read_keys && b->read_lens && b->tag_at;
}

/* Puts the flows at their first read in b->who, by slot when a call must
 * keep to one, and cuts them into groups. Returns the number of groups (0:
 * nothing to read, or no memory: the flows then send their own reads). */
static size_t group(batch *b, int plain) {
  size_t k = 0;
  for (size_t i = 0; i < b->n; i++)
    if (groupable(b, i, plain))
      b->who[k++] = i;
  keyed *ks = NULL;
  if (k > 1 && one_slot_only(b->c)) {
    if (!(ks = malloc(k * sizeof *ks)))
      return 0;
    for (size_t j = 0; j < k; j++) {
      const xf__key *key = &b->flows[b->who[j]].key;
      ks[j] = (keyed){xf__cluster_keyslot(key->data, key->len), b->who[j]};
    }
    qsort(ks, k, sizeof *ks, by_slot);
    for (size_t j = 0; j < k; j++)
      b->who[j] = ks[j].flow;
  }
  size_t ng = 0;
  for (size_t s = 0, e; s < k; s = e) {
    for (e = s + 1; e < k && e - s < READ_MANY_MAX_KEYS; e++)
      if (ks && ks[e].slot != ks[s].slot)
        break;
    b->groups[ng++] = (xf__batch_group){s, e - s, NULL, 0, NULL, {0}, 0};
  }
  free(ks);
  return ng;
}

/* How far a tag's key is looked for among the group's (past that it is
 * read twice: a batch's keys rarely carry so many different tags). */
#define TAG_DEDUP 64

/* After the group's entries' keys (keys, lens), the tags' keys its flows'
 * reads carry, each once (b->tag_at says where each flow's are). Returns how
 * many keys in all. */
static size_t add_tags(batch *b, const xf__batch_group *grp, const char **keys,
                       size_t *lens) {
  size_t nk = grp->count;
  for (size_t j = grp->first; j < grp->first + grp->count; j++) {
    const char *const *tk;
    const size_t *tl;
    size_t nt = xf__flow_tags_in_read(&b->flows[b->who[j]], &tk, &tl);
    for (size_t t = 0; t < nt; t++) {
      size_t k = grp->count;
      while (k < nk && k < grp->count + TAG_DEDUP &&
             !(lens[k] == tl[t] && memcmp(keys[k], tk[t], tl[t]) == 0))
        k++;
      if (k == nk || k == grp->count + TAG_DEDUP) {
        k = nk++;
        keys[k] = tk[t], lens[k] = tl[t];
      }
      b->tag_at[j * TAG_SLOTS + t] = k;
    }
  }
  return nk;
}

/* The command of each group: the flow's own read when alone, else a
 * read_many on the group's keys (plain: an MGET of them, and of the tags'
 * keys the flows' reads carry). */
static void encode(batch *b, size_t ng, int plain) {
  size_t nm = 0, at = 0;
  for (size_t g = 0; g < ng; g++) {
    xf__batch_group *grp = &b->groups[g];
    if (grp->count == 1) {
      grp->cmd = &b->flows[b->who[grp->first]].cmd;
    } else {
      const char **keys = b->keys + grp->first;
      size_t *lens = b->lens + grp->first;
      if (plain && b->read_keys) /* room for the tags' keys after the entries' */
        keys = b->read_keys + at, lens = b->read_lens + at;
      for (size_t j = 0; j < grp->count; j++) {
        keys[j] = b->flows[b->who[grp->first + j]].key.data;
        lens[j] = b->flows[b->who[grp->first + j]].key.len;
      }
      grp->cmd = &b->many[nm++];
      if (plain) {
        size_t nk = b->read_keys ? add_tags(b, grp, keys, lens) : grp->count;
        grp->extra = nk - grp->count;
        at += nk;
        xf__entry_mget_cmd(grp->cmd, nk, keys, lens);
      } else
        xf__entry_read_many_cmd(grp->cmd, grp->count, b->keys + grp->first,
                                b->lens + grp->first);
      grp->cmd->clock_out = &grp->clock; /* the flows learn the server's clock */
      if (b->c->near) /* and whether their values may be kept near (each flow's
                         pending marker was taken when it started: before this) */
        grp->cmd->track_out = &grp->track;
    }
    b->cmds[g] = grp->cmd;
  }
}

/* A refusal that may be about some of the keys only: a node that will not
 * run a multi-key call for its slot right now (a slot migrating, keys split
 * between two nodes; or keys it finds in several slots), or an ACL that
 * allows some keys and not others. Each key's own read then gets what it
 * would alone (ASK followed per key, NOPERM for the keys denied). */
static int refused_for_some_keys(const xf__reply *r) {
  static const char *const prefixes[] = {"TRYAGAIN", "CROSSSLOT", "MOVED", "ASK", "NOPERM"};
  for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++)
    if (strncmp(r->str, prefixes[i], strlen(prefixes[i])) == 0)
      return 1;
  return 0;
}

/* An MGET's reply r of the group's entries then grp->extra tags' values,
 * split into each flow's part: the entry's reply, or for a flow whose read
 * carries tags the array of it and its tags' values (copies: a tag may be
 * several flows'), as its own MGET gets it. r is freed. */
static int split_with_tags(batch *b, const xf__batch_group *grp, xf__reply *r,
                           xf__reply **parts) {
  size_t total = grp->count + grp->extra;
  int ok = r->type == XF_REPLY_ARRAY && r->elements == total;
  for (size_t k = 0; ok && k < total; k++)
    ok = r->element[k] != NULL;
  memset(parts, 0, grp->count * sizeof *parts);
  int rc =
      ok ? XF_OK : xf__rt_fail(&b->c->rt, XF_EPROTO, "MGET reply: not %zu replies", total);
  for (size_t j = 0; rc == XF_OK && j < grp->count; j++) {
    const char *const *tk;
    const size_t *tl;
    size_t nt = xf__flow_tags_in_read(&b->flows[b->who[grp->first + j]], &tk, &tl);
    if (nt == 0) {
      parts[j] = r->element[j];
      r->element[j] = NULL;
      continue;
    }
    xf__reply *arr = calloc(1, sizeof *arr);
    if (arr && (arr->element = calloc(nt + 1, sizeof *arr->element)) != NULL) {
      arr->type = XF_REPLY_ARRAY;
      arr->elements = nt + 1;
      arr->element[0] = r->element[j];
      r->element[j] = NULL;
      for (size_t t = 0; t < nt && arr; t++)
        if (!(arr->element[1 + t] =
                  xf__reply_copy(r->element[b->tag_at[(grp->first + j) * TAG_SLOTS + t]])))
          xf__reply_free(arr), arr = NULL;
    } else {
      free(arr);
      arr = NULL;
    }
    if (!(parts[j] = arr))
      rc = xf__rt_fail(&b->c->rt, XF_ENOMEM, "out of memory for a read's tags");
  }
  if (rc != XF_OK)
    for (size_t j = 0; j < grp->count; j++)
      xf__reply_free(parts[j]), parts[j] = NULL;
  xf__reply_free(r);
  return rc;
}

/* Feeds each flow of grp its part of read_many's outcome (rc, r): its own
 * read reply, or the error the whole call met. */
static void hand_out(batch *b, const xf__batch_group *grp, int rc, xf__reply *r,
                     int64_t now_ms, int plain) {
  if (rc == XF_OK && r->type == XF_REPLY_ERROR) {
    if (refused_for_some_keys(r)) {
      xf__reply_free(r); /* the flows stay at their SEND */
      return;
    }
    rc = xf__script_error(&b->c->rt, XF_SCRIPT_READ_MANY, r);
  }
  xf__reply **parts = b->parts + grp->first;
  if (rc == XF_OK && grp->extra)
    rc = split_with_tags(b, grp, r, parts);
  else if (rc == XF_OK)
    rc = xf__entry_split_read_many(&b->c->rt, r, grp->count, parts);
  for (size_t j = 0; j < grp->count; j++) {
    size_t i = b->who[grp->first + j];
    b->flows[i].clock = grp->clock;
    b->flows[i].track = grp->track; /* read_done offers its value to the near cache */
    b->flows[i].plain_read = plain; /* its part: GET's reply, or the read script's */
    b->steps[i] = xf__flow_reply(&b->flows[i], rc, rc == XF_OK ? parts[j] : NULL, now_ms);
  }
}

/* The groups whose read_many the server did not know (a fresh server, after
 * SCRIPT FLUSH): SCRIPT LOAD then the call again, every group in one more
 * pipeline. A second NOSCRIPT is an error (hand_out). */
static void reload(batch *b, size_t ng, size_t nm) {
  size_t k = 0;
  for (size_t g = 0; g < ng; g++)
    if (b->groups[g].reload) {
      xf__cmd *load = &b->many[nm++];
      xf__script_load_cmd(load, XF_SCRIPT_READ_MANY, b->groups[g].cmd->key,
                          b->groups[g].cmd->keylen);
      b->cmds[k++] = load;
      b->cmds[k++] = b->groups[g].cmd;
    }
  xf__command_many(b->c, k, b->cmds, b->rcs, b->replies);
  int64_t now_ms = xf__now_ms();
  k = 0;
  for (size_t g = 0; g < ng; g++) {
    xf__batch_group *grp = &b->groups[g];
    if (!grp->reload)
      continue;
    grp->reload = 0;
    int rc = b->rcs[k];
    if (rc == XF_OK)
      rc = xf__script_loaded(&b->c->rt, XF_SCRIPT_READ_MANY, b->replies[k]);
    k++;
    if (rc == XF_OK) {
      hand_out(b, grp, b->rcs[k], b->replies[k], now_ms, 0);
    } else {
      if (b->replies[k])
        xf__reply_free(b->replies[k]);
      hand_out(b, grp, rc, NULL, now_ms, 0);
    }
    k++;
  }
}

void xf__batch_read_all(batch *b) {
  if (!b->groups) {
    b->groups = malloc(b->n * sizeof *b->groups);
    b->many = malloc(b->n * sizeof *b->many);
    if (!b->groups || !b->many)
      return; /* the flows send their own reads */
  }
  int plain = b->c->plain_hits && xf__clocks_fresh(b->c, xf__now_ms());
  if (plain && b->c->entry_format != XF_ENTRY_STRING)
    return; /* plain HMGETs: send_all pipelines them, one write per node (any
               to a server whose clock is not fresh goes as the read script) */
  size_t ng = group(b, plain);
  if (ng == 0)
    return;
  encode(b, ng, plain);
  size_t nm = 0, reloads = 0;
  for (size_t g = 0; g < ng; g++)
    nm += b->groups[g].count > 1;
  xf__command_many(b->c, ng, b->cmds, b->rcs, b->replies);
  int64_t now_ms = xf__now_ms();
  for (size_t g = 0; g < ng; g++) {
    xf__batch_group *grp = &b->groups[g];
    if (grp->count == 1) {
      size_t i = b->who[grp->first];
      b->steps[i] = xf__flow_reply(&b->flows[i], b->rcs[g], b->replies[g], now_ms);
    } else if (!plain && b->rcs[g] == XF_OK && xf__script_missing(b->replies[g])) {
      xf__reply_free(b->replies[g]);
      grp->reload = 1;
      reloads++;
    } else {
      hand_out(b, grp, b->rcs[g], b->replies[g], now_ms, plain);
    }
  }
  if (reloads)
    reload(b, ng, nm);
}
