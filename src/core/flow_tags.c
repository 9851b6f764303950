/* Tags in the flow (policy.tags, options.namespace_tag, xf_invalidate_tags).
 *
 * Each tag has its own key, "<prefix>xf-tag:{<name>}" (the namespace's:
 * "<prefix>xf-ns"), holding its version: a tagged call reads the versions of
 * its tags first, one command per tag on its master (a GET; lua/tag_read.lua
 * when the key is missing, to make it: a tag's key is in its own Cluster
 * slot, never in the entry's script), so they are read before its loader
 * runs. Without a near cache, where one command may read any keys
 * (standalone Redis), the call's first read carries its tags' keys after
 * the entry's instead (an MGET; the read script's KEYS where the clock asks
 * for the script), so a tagged hit costs the one command of an untagged one;
 * a tag without a key yet sends the call the way above. Where the read
 * cannot carry them (a set; a call on one node without a near cache whose
 * read does not), one MGET of the tags' keys reads every version at once. In
 * Redis Cluster a multi-key command must keep to one slot (CROSSSLOT, on one
 * node as on several) and each tag's key is in a slot of its own: there,
 * without a near cache, tag_read.lua runs on the first tag left with the
 * others as its ARGV and reads each one its node holds (a script may touch
 * undeclared keys of other slots of its node), with as ARGV the others the
 * router's slot map puts on the same master: one command per node holding
 * tags (a key the map placed wrong is left for the next command, which
 * goes where the first one unread is). The value it
 * writes records them (the tag record, in the
 * entry's header: entry_string.c), and an entry is served only while the
 * record it carries is the one the call built from the versions it read.
 * Invalidating a tag raises its version (lua/tag_bump.lua): one command,
 * whatever the number of entries that carry it, and every one of them is a
 * miss for every call that reads the new version.
 *
 * With a near cache the versions live in it, under their tags' keys: read
 * with a plain GET over a tracked connection, kept (near.h: unless an
 * invalidation of the key overtook the read) and dropped by Redis' own
 * invalidation when the tag is raised anywhere, so a tagged call whose
 * versions are kept sends nothing for them. An invalidation drops its own
 * copies and always fences each raise on the tag's connection before it goes
 * on (flow_tag_raise.c: a PING, or a WAIT where the tag's master has a
 * replica): once it returns, Redis has sent the invalidation to every near
 * cache of the fleet, and a replica that takes over has it.
 *
 * The tag record, and an entry judged by it: flow_tag_record.c. */
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "cluster.h"
#include "event.h"
#include "flow_steps.h"
#include "near.h"
#include "script.h"

#define TAG_OPEN XF__TAG_OPEN
#define NS_TAG XF__NS_TAG
/* How long a version kept in the near cache is used (driver ms) before it is
 * read again: tracking keeps it correct; this bounds what a lost
 * invalidation the tracker could not notice would cost. */
#define TAG_NEAR_MS 60000

/* Checks the names and the count; XF_OK or XF_EINVAL with the message. */
static int check_names(xf__flow *f) {
  if (xf__flow_tag_count(f) > XF_MAX_TAGS)
    return xf__rt_fail(f->rt, XF_EINVAL, "%zu tags, above XF_MAX_TAGS (%d)",
                       xf__flow_tag_count(f), XF_MAX_TAGS);
  if (f->tag_n && !f->tag_names)
    return xf__rt_fail(f->rt, XF_EINVAL, "tags is NULL");
  for (size_t i = 0; i < f->tag_n; i++) {
    const char *name = f->tag_names[i];
    size_t len = name ? strlen(name) : 0;
    if (len == 0 || len > XF_MAX_TAG_LEN)
      return xf__rt_fail(f->rt, XF_EINVAL, "tag %zu is %s", i,
                         name ? "empty or longer than XF_MAX_TAG_LEN" : "NULL");
  }
  return XF_OK;
}

/* The names copied into one block the flow owns (f->tag_copy) until they are
 * all read: the caller's may be gone by then (a sans-I/O call, an event loop). */
static int copy_names(xf__flow *f) {
  size_t bytes = f->tag_n * sizeof(char *);
  for (size_t i = 0; i < f->tag_n; i++)
    bytes += strlen(f->tag_names[i]) + 1;
  char **names = bytes ? malloc(bytes) : NULL;
  if (bytes && !names)
    return xf__rt_fail(f->rt, XF_ENOMEM, "out of memory for %zu tags", f->tag_n);
  char *at = (char *)(names + f->tag_n);
  for (size_t i = 0; i < f->tag_n; i++) {
    size_t len = strlen(f->tag_names[i]) + 1;
    names[i] = memcpy(at, f->tag_names[i], len);
    at += len;
  }
  f->tag_copy = names;
  f->tag_names = (const char *const *)names;
  return XF_OK;
}

void xf__flow_tags_free(xf__flow *f) {
  free(f->tag_read_keys); /* one block with the lengths and the tags' keys */
  f->tag_read_keys = NULL;
  f->tag_read_lens = NULL;
  f->tag_in_read = f->tag_all_at_once = f->tag_by_node = 0;
  free(f->tag_copy);
  f->tag_copy = NULL;
  f->tag_names = NULL;
  xf__key_free(&f->tag_key);
}

static xf__step next_tag(xf__flow *f);
static xf__step by_node_send(xf__flow *f);

int xf__flow_tags_near_fast(xf__flow *f, xf__step *step) {
  const xf_policy *p = f->p;
  int ns = f->cfg->namespace_tag != 0;
  if (f->cfg->entry_format != XF_ENTRY_STRING || p->ntags + (size_t)ns > XF_MAX_TAGS ||
      (p->ntags && !p->tags))
    return 0; /* xf__flow_tags_first says why */
  for (size_t i = 0; i < p->ntags; i++) {
    size_t len = p->tags[i] ? strlen(p->tags[i]) : 0;
    if (len == 0 || len > XF_MAX_TAG_LEN)
      return 0;
  }
  f->tag_names64 = xf__flow_tags_names_hash64(p->tags, p->ntags, ns);
  f->tag_fast = 1;
  int served = xf__flow_near_first(f, f->input_ms, step);
  f->tag_fast = 0;
  return served;
}

static int build_key(xf__flow *f, size_t i);

/* Whether the versions are read with the entry (the first READ carries the
 * tags' keys): a read without a near cache to keep them, where one command
 * may read them all (one node: standalone Redis). In Redis Cluster each
 * tag's key is in a slot of its own: they are read apart. */
static int read_with_entry(const xf__flow *f) {
  return (f->kind == XF_KIND_GET_OR_COMPUTE || f->kind == XF_KIND_GET) &&
         f->tag_next == XF__READ && !f->rt->ports.near && f->rt->one_node;
}

/* The keys of that READ, the entry's first, into one block
 * (f->tag_read_keys); XF_ENOMEM (the tags are then read apart). */
static int build_read_keys(xf__flow *f) {
  size_t n = xf__flow_tag_count(f) + 1;
  size_t most = f->cfg->prefix_len + sizeof TAG_OPEN + XF_MAX_TAG_LEN + 1;
  char *block = malloc(n * (sizeof(char *) + sizeof(size_t)) + (n - 1) * most);
  if (!block)
    return XF_ENOMEM;
  const char **keys = (const char **)(void *)block;
  size_t *lens = (size_t *)(void *)(keys + n);
  char *at = (char *)(lens + n);
  keys[0] = f->key.data, lens[0] = f->key.len;
  for (size_t i = 1; i < n; i++) {
    if (build_key(f, i - 1) != XF_OK) {
      free(block);
      return XF_ENOMEM;
    }
    lens[i] = f->tag_key.len;
    keys[i] = memcpy(at, f->tag_key.data, lens[i]);
    at += lens[i];
  }
  xf__key_free(&f->tag_key);
  f->tag_read_keys = keys;
  f->tag_read_lens = lens;
  return XF_OK;
}

size_t xf__flow_tags_in_read(const xf__flow *f, const char *const **keys,
                             const size_t **lens) {
  if (f->state != XF__READ || !f->tag_in_read)
    return 0;
  *keys = f->tag_read_keys + 1;
  *lens = f->tag_read_lens + 1;
  return xf__flow_tag_count(f);
}

void xf__flow_tags_read_cmd(xf__flow *f) {
  size_t n = xf__flow_tag_count(f) + 1;
  if (f->plain_read) { /* the transport sends the script where the clock is stale */
    xf__entry_mget_cmd(&f->cmd, n, f->tag_read_keys, f->tag_read_lens);
    f->cmd.plain_out = &f->plain_read;
  } else
    xf__script_cmd_keys(&f->cmd, XF_SCRIPT_READ, n, f->tag_read_keys, f->tag_read_lens);
}

int xf__flow_tags_first(xf__flow *f, int next, xf__step *step) {
  if (f->kind == XF_KIND_GET_OR_COMPUTE || f->kind == XF_KIND_SET) {
    f->tag_names = f->p->tags;
    f->tag_n = f->p->ntags;
    f->tag_ns = f->cfg->namespace_tag;
  }
  if (!xf__flow_tag_count(f))
    return 0;
  int rc = check_names(f);
  if (rc == XF_OK)
    rc = copy_names(f);
  if (rc == XF_OK && f->kind != XF_KIND_INVALIDATE &&
      f->cfg->entry_format != XF_ENTRY_STRING)
    rc = xf__rt_fail(f->rt, XF_EINVAL, "tags need entry format 2 (XF_ENTRY_STRING)");
  if (rc != XF_OK) {
    *step = xf__flow_done(f, rc);
    return 1;
  }
  f->tag_i = 0;
  f->tag_next = next;
  f->tag_fencing = f->tag_raised_again = 0;
  if (read_with_entry(f) && build_read_keys(f) == XF_OK) {
    f->tag_in_read = 1; /* the versions come with the entry (xf__flow_tags_split_read) */
    *step = xf__flow_send(f, XF__READ);
    return 1;
  }
  const xf__ports *ports = &f->rt->ports;
  if (f->kind != XF_KIND_INVALIDATE && !ports->near && f->rt->one_node &&
      build_read_keys(f) == XF_OK) {
    f->tag_all_at_once = 1; /* one MGET (xf__flow_tags_encode, read_all_at_once) */
    *step = xf__flow_send(f, XF__TAGS);
    return 1;
  }
  if (f->kind != XF_KIND_INVALIDATE && !ports->near && !f->rt->one_node &&
      xf__flow_tag_count(f) > 1 && build_read_keys(f) == XF_OK) {
    f->tag_by_node = 1; /* one command per node (by_node_send, read_by_node) */
    f->tag_unread = (uint32_t)((1u << xf__flow_tag_count(f)) - 1);
    *step = by_node_send(f);
    return 1;
  }
  f->tag_kept_all = f->kind == XF_KIND_GET_OR_COMPUTE && ports->near != NULL;
  if (f->tag_kept_all) { /* the epoch before any version is looked up */
    f->tag_names64 = xf__flow_tags_names_hash64(f->tag_names, f->tag_n, f->tag_ns);
    f->tag_stamp = (xf__tag_stamp){.epoch = ports->near->tag_epoch(ports->self),
                                   .names = f->tag_names64,
                                   .until_ms = INT64_MAX};
  }
  *step = f->kind == XF_KIND_INVALIDATE ? xf__flow_tags_raise_next(f) : next_tag(f);
  return 1;
}

/* Builds tag i's key into f->tag_key. */
static int build_key(xf__flow *f, size_t i) {
  char buf[sizeof TAG_OPEN + XF_MAX_TAG_LEN + 1];
  size_t len;
  if (i < f->tag_n) {
    size_t n = strlen(f->tag_names[i]);
    memcpy(buf, TAG_OPEN, sizeof TAG_OPEN - 1);
    memcpy(buf + sizeof TAG_OPEN - 1, f->tag_names[i], n);
    len = sizeof TAG_OPEN - 1 + n;
    buf[len++] = '}';
  } else {
    len = sizeof NS_TAG - 1;
    memcpy(buf, NS_TAG, len);
  }
  xf__key_free(&f->tag_key);
  xf__config cfg = *f->cfg; /* the tag's key may be longer than a user key */
  cfg.max_key_len = sizeof buf;
  return xf__key_build(&cfg, f->rt, buf, len, &f->tag_key);
}

void xf__flow_tags_encode(xf__flow *f) {
  const xf__port_near *near = f->rt->ports.near;
  if (f->tag_fencing) {
    xf__flow_tags_fence_cmd(f);
    return;
  }
  if (f->state == XF__TAGS && f->tag_all_at_once) { /* the keys after the entry's */
    xf__entry_mget_cmd(&f->cmd, xf__flow_tag_count(f), f->tag_read_keys + 1,
                       f->tag_read_lens + 1);
    return;
  }
  if (f->state == XF__TAGS && f->tag_by_node) { /* the first left: where it goes */
    xf__script_cmd(&f->cmd, XF_SCRIPT_TAG_READ, f->tag_key.data, f->tag_key.len, 0, NULL,
                   NULL);
    f->cmd.more_argc = f->tag_nsent - 1;
    f->cmd.more_argv = f->tag_sent_keys + 1;
    f->cmd.more_lens = f->tag_sent_lens + 1;
    return;
  }
  if (f->state == XF__TAGS && f->tag_plain) { /* kept if no invalidation overtakes it */
    xf__entry_get_cmd(&f->cmd, f->tag_key.data, f->tag_key.len);
    f->track.node = NULL;
    if (near) {
      f->near_token = near->token(f->rt->ports.self);
      f->cmd.track_out = &f->track;
    }
    return;
  }
  int script = f->state == XF__BUMP ? XF_SCRIPT_TAG_BUMP : XF_SCRIPT_TAG_READ;
  xf__script_cmd(&f->cmd, script, f->tag_key.data, f->tag_key.len, 0, NULL, NULL);
  if (f->state == XF__BUMP) {
    f->tag_raise_stream = 0;
    f->cmd.stream_out = &f->tag_raise_stream;
  }
}

/* Every tag read (or raised): on to the call's own steps. */
static xf__step tags_done(xf__flow *f) {
  if (f->kind == XF_KIND_INVALIDATE)
    return xf__flow_done(f, XF_OK); /* frees the names */
  xf__flow_tags_record(f);
  xf__flow_tags_free(f);
  if (f->kind == XF_KIND_SET) {
    f->w.tags = f->tag_rec;
    f->w.tags_len = f->tag_rec_len;
  }
  xf__step step; /* the entry kept with the versions just read: served */
  const xf__ports *ports = &f->rt->ports;
  if ((f->kind == XF_KIND_GET_OR_COMPUTE || f->kind == XF_KIND_GET) && ports->near &&
      !f->near_elected && xf__flow_near_first(f, f->input_ms, &step))
    return step; /* stamped there when every version was kept */
  return xf__flow_send(f, f->tag_next);
}

/* A version taken from the near cache, for the entry's stamp: all on one
 * node (the entry's, near.c checks), each one's connection, the shortest
 * life. */
static void note_kept(xf__flow *f, const xf__port_hit *h) {
  xf__tag_stamp *st = &f->tag_stamp;
  if (st->nfds == 0)
    st->node = h->node;
  else if (st->node != h->node)
    f->tag_kept_all = 0;
  st->fds[st->nfds++] = h->fd;
  if (f->input_ms + h->remaining_ms < st->until_ms)
    st->until_ms = f->input_ms + h->remaining_ms;
}

/* A tag's key could not be built: a get-or-compute fails open as on an
 * unreachable read, a set returns it. */
static xf__step out_of_memory(xf__flow *f) {
  return f->kind == XF_KIND_GET_OR_COMPUTE ? xf__flow_read_decide(f, XF_ENOMEM, f->input_ms)
                                           : xf__flow_done(f, XF_ENOMEM);
}

/* The next tag whose version is not kept in the near cache is read (its key
 * built, XF__TAGS); the kept ones are taken as they go; all known: on. */
static xf__step next_tag(xf__flow *f) {
  const xf__ports *ports = &f->rt->ports;
  for (; f->tag_i < xf__flow_tag_count(f); f->tag_i++) {
    if (build_key(f, f->tag_i) != XF_OK)
      return out_of_memory(f);
    f->tag_plain = 1; /* a GET; the script only when the tag has no key yet */
    xf__port_hit h;
    if (!ports->near ||
        !ports->near->get(ports->self, f->tag_key.data, f->tag_key.len, f->input_ms, &h)) {
      f->tag_kept_all = 0;
      return xf__flow_send(f, XF__TAGS);
    }
    xf__reply kept = {.type = XF_REPLY_STRING, .str = h.data, .len = h.len};
    int ok = xf__flow_tags_version(&kept, &f->tag_versions[f->tag_i]);
    free(h.data);
    if (!ok) { /* not a version of ours: read it again */
      f->tag_kept_all = 0;
      return xf__flow_send(f, XF__TAGS);
    }
    if (f->tag_kept_all) /* where it is tracked, and for how long it is used */
      note_kept(f, &h);
  }
  return tags_done(f);
}

int xf__flow_tags_split_read(xf__flow *f, xf__reply **r, xf__step *step) {
  size_t n = xf__flow_tag_count(f);
  xf__reply *all = *r;
  /* the tags' values last: after the MGET's entry, or the script's fields */
  int ok = all->type == XF_REPLY_ARRAY && all->elements > n &&
           (!f->plain_read || all->elements == n + 1);
  for (size_t i = 0; ok && i < n; i++) {
    const xf__reply *v = all->element[all->elements - n + i];
    ok = v && xf__flow_tags_version(v, &f->tag_versions[i]);
  }
  free(f->tag_read_keys);
  f->tag_read_keys = NULL;
  f->tag_in_read = 0;
  if (!ok) { /* a tag without a key (never seen, evicted, flushed): each read
                apart (tag_read.lua makes it), then the entry again */
    xf__reply_free(all);
    *r = NULL;
    f->tag_i = 0;
    *step = next_tag(f);
    return 0;
  }
  for (size_t i = all->elements - n; i < all->elements; i++) {
    xf__reply_free(all->element[i]);
    all->element[i] = NULL;
  }
  all->elements -= n;
  if (f->plain_read) { /* the GET's reply, as a read of the entry alone gets it */
    *r = all->element[0];
    all->element[0] = NULL;
    xf__reply_free(all);
  }
  xf__flow_tags_record(f);
  xf__flow_tags_free(f);
  return 1;
}

/* The next tag raised (its key built), or the end. */
xf__step xf__flow_tags_raise_next(xf__flow *f) {
  if (f->tag_i >= xf__flow_tag_count(f))
    return tags_done(f);
  if (build_key(f, f->tag_i) != XF_OK)
    return xf__flow_done(f, XF_ENOMEM);
  return xf__flow_send(f, XF__BUMP);
}

/* The master the router's slot map puts tag i's key on, or -1 (no map). */
static int master_of(const xf__flow *f, size_t i) {
  const char *key = f->tag_read_keys[1 + i];
  size_t len = f->tag_read_lens[1 + i];
  return f->rt->slot_map
             ? xf__cluster_map_master(f->rt->slot_map, xf__cluster_keyslot(key, len))
             : -1;
}

/* The command of the first tag unread (tag_read.lua: its key as KEYS[1],
 * where the command is routed) and of the others its master holds (ARGV). */
static xf__step by_node_send(xf__flow *f) {
  size_t first = 0, n = 0;
  while (!(f->tag_unread & (1u << first)))
    first++;
  if (build_key(f, first) != XF_OK)
    return out_of_memory(f);
  int node = master_of(f, first);
  for (size_t i = first; i < xf__flow_tag_count(f); i++) {
    if (!(f->tag_unread & (1u << i)) ||
        (i != first && (node < 0 || master_of(f, i) != node)))
      continue;
    f->tag_sent[n] = (unsigned char)i;
    f->tag_sent_keys[n] = f->tag_read_keys[1 + i];
    f->tag_sent_lens[n++] = f->tag_read_lens[1 + i];
  }
  f->tag_nsent = n;
  return xf__flow_send(f, XF__TAGS);
}

/* Its reply: the first tag's version (alone, or first of an array), then
 * each other's, or 0 where its key was not on that node after all (a map
 * behind a resharding): unread still. A reply of another shape (an
 * error): each tag read apart. */
static xf__step read_by_node(xf__flow *f, xf__reply *r) {
  size_t n = f->tag_nsent;
  int ok = n == 1 || (r->type == XF_REPLY_ARRAY && r->elements == n);
  for (size_t i = 0; ok && i < n; i++) {
    const xf__reply *v = n == 1 ? r : r->element[i];
    if (i > 0 && v && v->type == XF_REPLY_INTEGER && v->integer == 0)
      continue;
    ok = v && xf__flow_tags_version(v, &f->tag_versions[f->tag_sent[i]]);
    f->tag_unread &= ~(1u << f->tag_sent[i]);
  }
  xf__reply_free(r);
  if (!ok) {
    f->tag_by_node = 0;
    f->tag_i = 0;
    return next_tag(f);
  }
  return f->tag_unread ? by_node_send(f) : tags_done(f);
}

/* The MGET of every tag's key: the versions, then on; a key missing (a tag
 * never seen, evicted, flushed): each read apart (tag_read.lua makes it). */
static xf__step read_all_at_once(xf__flow *f, xf__reply *r) {
  size_t n = xf__flow_tag_count(f);
  int ok = r->type == XF_REPLY_ARRAY && r->elements == n;
  for (size_t i = 0; ok && i < n; i++)
    ok = r->element[i] && xf__flow_tags_version(r->element[i], &f->tag_versions[i]);
  xf__reply_free(r);
  free(f->tag_read_keys);
  f->tag_read_keys = NULL;
  f->tag_all_at_once = 0;
  if (ok)
    return tags_done(f);
  f->tag_i = 0;
  return next_tag(f);
}

xf__step xf__flow_tags_reply(xf__flow *f, int rc, xf__reply *r, int64_t now_ms) {
  if (rc == XF_OK && f->state == XF__TAGS && f->tag_all_at_once)
    return read_all_at_once(f, r);
  if (rc == XF_OK && f->state == XF__TAGS && f->tag_by_node)
    return read_by_node(f, r);
  if (f->tag_fencing)
    return xf__flow_tags_fenced(f, rc, r);
  if (rc == XF_OK && f->state == XF__TAGS && f->tag_plain && r->type == XF_REPLY_NIL) {
    xf__reply_free(r); /* a tag never seen, or its key gone: made by the script */
    f->tag_plain = 0;
    return xf__flow_send(f, XF__TAGS);
  }
  int64_t v = 0;
  char digits[24];
  size_t ndigits = 0;
  if (rc == XF_OK) {
    if (!xf__flow_tags_version(r, &v))
      rc = xf__rt_fail(f->rt, XF_EPROTO, "a tag's version is not decimal digits");
    else
      memcpy(digits, r->str, ndigits = r->len);
    xf__reply_free(r);
  }
  if (rc != XF_OK) {
    xf__flow_tags_free(f);
    /* A get-or-compute fails open as on an unreachable read; the others
     * (set, invalidate) return what went wrong. */
    if (f->kind == XF_KIND_GET_OR_COMPUTE)
      return xf__flow_read_decide(f, rc, now_ms);
    return xf__flow_done(f, rc);
  }
  if (f->state == XF__TAGS && f->tag_plain && f->track.node) {
    const xf__ports *ports = &f->rt->ports;
    f->rt->stats.near_evictions += ports->near->put(
        ports->self, &f->track, f->near_token, f->tag_key.data, f->tag_key.len, digits,
        ndigits, NULL, 0, 0, 0, f->sent_ms + TAG_NEAR_MS, 0);
  }
  if (f->state == XF__TAGS) {
    f->tag_versions[f->tag_i++] = v;
    return next_tag(f);
  }
  return xf__flow_tags_raised(f);
}
