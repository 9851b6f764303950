/* The flow's machine (flow.h): every call kind, once started (flow_begin.c),
 * has every command encoded here and every reply come in here. So NOSCRIPT recovery
 * (through the one classifier, xf__reply_classify), error replies, superseded writes and
 * the share's drops after a write or delete are decided once, for every kind and every
 * driver. Get-or-compute's own decisions (XFetch, the lease, waits, loads, fail-open) are
 * flow_compute.c's. */
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "codec.h"
#include "event.h"
#include "flow_steps.h"
#include "near.h"
#include "script.h"

static const int script_of[] = {
    [XF__READ] = XF_SCRIPT_READ,     [XF__LEASE] = XF_SCRIPT_LEASE,
    [XF__WRITE] = XF_SCRIPT_WRITE,   [XF__RELEASE] = XF_SCRIPT_RELEASE,
    [XF__DELETE] = XF_SCRIPT_DELETE, [XF__RENEW] = XF_SCRIPT_RENEW,
    [XF__TOUCH] = XF_SCRIPT_TOUCH};

/* The script the command of state runs. */
static int script_for(int state) {
  return state == XF__TAGS   ? XF_SCRIPT_TAG_READ
         : state == XF__BUMP ? XF_SCRIPT_TAG_BUMP
                             : script_of[state];
}

/* The key the command of f's state is on: a tag's, or the entry's. */
static const xf__key *cmd_key(const xf__flow *f) {
  return f->state == XF__TAGS || f->state == XF__BUMP ? &f->tag_key : &f->key;
}

/* ---- sending and ending ------------------------------------------------------- */

xf__step xf__flow_encode(xf__flow *f) {
  const char *key = f->key.data;
  size_t len = f->key.len;
  switch (f->state) {
  case XF__READ:
    if (f->tag_in_read) /* its tags' keys with the entry's (flow_tags.c) */
      xf__flow_tags_read_cmd(f);
    else if (f->plain_read) { /* the transport sends the script where the clock is stale */
      if (f->read_format == XF_ENTRY_STRING)
        xf__entry_get_cmd(&f->cmd, key, len);
      else
        xf__entry_fields_cmd(&f->cmd, key, len);
      f->cmd.plain_out = &f->plain_read;
    } else
      xf__entry_read_cmd(&f->cmd, key, len);
    break;
  case XF__LEASE:
    xf__entry_lease_cmd(&f->cmd, key, len, f->token, xf__flow_lease_ms(f), f->e.expiry_ms,
                        f->first_read_ms, f->cfg->entry_format);
    break;
  case XF__WRITE:
    xf__entry_write_cmd(&f->cmd, key, len, &f->w, f->cfg->entry_format);
    break;
  case XF__DELETE:
    xf__entry_delete_cmd(&f->cmd, key, len, f->cfg->tombstone_ms, f->cfg->entry_format);
    break;
  case XF__TOUCH: {
    xf__touch t = {.token = f->w.token,
                   .seen_e_ms = f->sink.prev_expiry_ms,
                   .ttl_ms = f->w.ttl_ms,
                   .keep_ms = f->w.keep_ms,
                   .start_ms = f->w.start_ms,
                   .tags = f->w.tags,
                   .tags_len = f->w.tags_len};
    xf__entry_touch_cmd(&f->cmd, key, len, &t);
    break;
  }
  case XF__RENEW: /* lease_len_ms: this renewal's length */
    xf__entry_renew_cmd(&f->cmd, key, len, f->token, f->lease_len_ms);
    break;
  case XF__TAGS:
  case XF__BUMP:
    xf__flow_tags_encode(f);
    break;
  case XF__FENCE: /* on key: the router sends it where the write went */
    xf__cmd_begin(&f->cmd, key, len);
    f->cmd.argc = 1;
    f->cmd.argv[0] = "PING";
    f->cmd.lens[0] = 4;
    break;
  default:
    xf__entry_release_cmd(&f->cmd, key, len, f->token, f->found_nothing ? f->p->wait_ms : 0,
                          f->failsafe_hold_ms);
  }
  /* A waiter re-reads to see the value the lease holder wrote: a replica
   * may not have it yet. */
  f->cmd.on_master = (f->state == XF__READ && (f->round > 0 || f->tag_in_read)) ||
                     f->state == XF__TAGS; /* a replica may not have a raise yet */
  f->cmd.clock_out = &f->clock;            /* the transport says whose clock answered */
  f->clock = NULL;
  f->cmd.asked_out = &f->asked; /* the router says whether an ASK led it */
  f->asked = 0;
  const xf__port_near *near = f->rt->ports.near;
  if (f->state == XF__READ && near) { /* the pending marker, before the send */
    f->near_token = near->token(f->rt->ports.self);
    f->track.node = NULL;
    f->cmd.track_out = &f->track;
  }
  f->sent_ms = f->input_ms; /* the command leaves no earlier */
  return XF_STEP_SEND;
}

xf__step xf__flow_done(xf__flow *f, int rc) {
  f->pending &= ~XF__PENDING_LOAD_START; /* no loader ran */
  if (f->pending)
    xf__flow_settle(f);
  f->rc = rc;
  f->state = XF__DONE;
  xf__flow_abandon(f);
  return XF_STEP_DONE;
}

void xf__flow_abandon(xf__flow *f) {
  xf__entry_free(&f->e);
  xf__sink_clear(&f->sink);
  xf__key_free(&f->key);
  if (f->tag_copy || f->tag_key.data || f->tag_read_keys) /* a tagged call's, before its
                                                              tags were read */
    xf__flow_tags_free(f);
}

void xf__flow_pack(xf__flow *f) {
  size_t min = f->p->compress_min_bytes;
  if (!min || f->w.kind != XF_WRITE_VALUE || f->w.len < min ||
      f->cfg->entry_format != XF_ENTRY_STRING)
    return;
  char *frame;
  size_t n, len = f->w.len;
  if (!xf__codec_pack(f->w.data, len, &frame, &n))
    return;
  /* The frame lives in the sink's buffer, freed with it (no field for a hit
   * to clear): past the loader's value and its NUL, or, for xf_set, whose
   * sink holds nothing, as that buffer. */
  if (f->w.data == f->sink.data) {
    char *grown = realloc(f->sink.data, len + 1 + n);
    if (!grown) {
      free(frame);
      return;
    }
    memcpy(grown + len + 1, frame, n);
    free(frame);
    f->sink.data = grown;
    frame = grown + len + 1;
  } else if (!f->sink.data) {
    f->sink.data = frame;
  } else {
    free(frame);
    return;
  }
  f->w.data = frame;
  f->w.len = n;
  f->w.zstd = 1;
}

int xf__flow_serve_bytes(xf__flow *f, const char *data, size_t len, xf_source source) {
  char *copy = malloc(len + 1);
  if (!copy)
    return xf__rt_fail(f->rt, XF_ENOMEM, "out of memory for a %zu-byte value", len);
  if (len)
    memcpy(copy, data, len);
  copy[len] = '\0';
  f->out->data = copy;
  f->out->len = len;
  f->out->source = source;
  return XF_OK;
}

int xf__flow_serve_entry(xf__flow *f, xf_source source) {
  size_t len = f->e.len;
  char *taken = xf__entry_take_value(&f->e); /* a hit copies its value once */
  if (!taken)
    return xf__flow_serve_bytes(f, f->e.value, len, source);
  f->out->data = taken;
  f->out->len = len;
  f->out->source = source;
  return XF_OK;
}

/* ---- outcomes ----------------------------------------------------------------- */

/* The read again, by the read script, on the very node that answered (an
 * ASK's target: with ASKING again, not via the slot's owner). */
static xf__step read_by_script(xf__flow *f) {
  int asked = f->asked;
  f->state = XF__READ;
  f->plain_read = 0;
  f->script_retried = 0;
  xf__step step = xf__flow_encode(f);
  f->cmd.ask_node = asked;
  return step;
}

/* A read: get-or-compute decides (flow_compute.c); a get has no loader to
 * fail open to, so Redis' errors are its own, and only a value within its
 * ttl is served. */
static xf__step read_done(xf__flow *f, int rc, xf__reply *r, int64_t now_ms) {
  if (rc == XF_OK && f->plain_read) {
    int64_t lo, hi;
    if (!xf__clock_server_now(f->clock, now_ms, &lo, &hi)) {
      /* No usable estimate of this server's clock: the transport sent the
       * HMGET on a fresh one (xf__entry_read_as), but the reply came in
       * after it aged past use (a stall of half the refresh period). Ask
       * it, with the read script. */
      xf__reply_free(r);
      return read_by_script(f);
    }
    xf__step step;
    if (f->tag_in_read && !xf__flow_tags_split_read(f, &r, &step))
      return step;
    rc = f->read_format == XF_ENTRY_STRING
             ? xf__entry_parse_string(f->rt, r, lo, hi, &f->e)
             : xf__entry_parse_fields(f->rt, r, lo, hi, &f->e);
    if (rc == XF_OK && !f->e.value && f->read_format == XF_ENTRY_HASH &&
        f->kind != XF_KIND_GET_OR_COMPUTE) {
      /* A get that found no value in a hash: only the read script sees the
       * hash's other fields, so only it tells an absent key or a malformed
       * entry from another program's hash (XF_EWRONGTYPE). A get-or-compute
       * asks the lease script next, which tells it too. */
      if (f->e.malformed)
        f->rt->stats.malformed--; /* the script counts it */
      xf__entry_free(&f->e);
      return read_by_script(f);
    }
  } else if (rc == XF_OK) {
    xf__step step;
    if (f->tag_in_read && !xf__flow_tags_split_read(f, &r, &step))
      return step;
    rc = xf__entry_parse_read(f->rt, r, &f->e);
    if (rc == XF_OK)
      xf__flow_learn_clock(f, f->e.now_ms, now_ms);
  }
  if (f->e.zstd) /* set by a parse that succeeded; before the near cache keeps it */
    rc = xf__entry_decode(f->rt, &f->e, f->cfg->max_value_len);
  if (rc != XF_OK && f->tag_in_read) { /* no versions read: as a failed tag read */
    f->tag_in_read = 0;
    xf__flow_tags_free(f);
  }
  if (rc == XF_OK && f->tag_rec_len && f->kind == XF_KIND_GET_OR_COMPUTE)
    xf__flow_tags_judge(f, &f->e); /* a refused entry has no value: not kept */
  else if (rc == XF_OK && f->tag_rec_len && f->kind == XF_KIND_GET)
    xf__flow_tags_judge_namespace(f, &f->e);
  if (rc == XF_OK && f->rt->ports.near)
    xf__flow_near_keep(f); /* with its tag record */
  if (f->kind == XF_KIND_GET_OR_COMPUTE)
    return xf__flow_read_decide(f, rc, now_ms);
  const xf__entry *e = &f->e;
  if (rc == XF_OK && (!e->value || e->remaining_ms <= 0 || e->negative)) {
    f->rt->stats.misses++; /* absent, stale, a cached not-found, malformed */
    xf__emit(f, XF_EV_MISS, -1, 0, 0);
    rc = XF_ENOTFOUND;
  } else if (rc == XF_OK) {
    f->rt->stats.hits++;
    xf__emit(f, XF_EV_HIT, XF_SOURCE_CACHE, 0, 0);
    rc = xf__flow_serve_entry(f, XF_SOURCE_CACHE);
  }
  return xf__flow_done(f, rc);
}

/* What a write or delete that Redis answered (rc, applied) leads to: a
 * superseded write is counted; a set says so, a get-or-compute serves its
 * value uncached. */
static xf__step change_done(xf__flow *f, int deleting, int rc, int applied) {
  if (deleting)
    return xf__flow_done(f, rc); /* applied: 0 when there was nothing to delete */
  if (rc == XF_OK && !applied) {
    f->rt->stats.superseded++;
    xf__emit(f, XF_EV_SUPERSEDED, -1, 0, 0);
  } else if (rc == XF_OK && f->state == XF__TOUCH) {
    f->rt->stats.revalidated++;
    xf__emit(f, XF_EV_REVALIDATED, -1, 0, 0);
  }
  if (f->kind == XF_KIND_GET_OR_COMPUTE)
    return xf__flow_written(f, rc == XF_OK && applied);
  if (rc == XF_OK && !applied)
    rc = xf__rt_fail(f->rt, XF_ESUPERSEDED, "not written: the entry holds a newer value");
  return xf__flow_done(f, rc);
}

/* A write (of any kind) or a delete. Whatever came of it, a fallback copy in
 * the share is older than what was just written or deleted (acknowledged or
 * not: it may have been applied): never serve it again. One that changed the
 * entry (a value written, a tombstone) is fenced when the client fences its
 * writes (options.write_fence): a PING on the same connection, whose reply
 * comes after Redis has sent the invalidations the write caused (it writes
 * the write's reply first, then theirs, in the same pass), so that the call
 * returns only once every near cache of the fleet can see them. */
static xf__step changed(xf__flow *f, int rc, xf__reply *r) {
  int deleting = f->state == XF__DELETE, applied = 0;
  const xf__ports *ports = &f->rt->ports;
  if (ports->share)
    ports->share->drop(ports->self, f->key.data, f->key.len);
  if (ports->near)
    ports->near->drop(ports->self, f->key.data, f->key.len);
  if (rc == XF_OK)
    rc = xf__entry_parse_int(f->rt, r,
                             deleting                ? "delete"
                             : f->state == XF__TOUCH ? "touch"
                                                     : "write",
                             &applied);
  if (!f->cfg->write_fence || rc != XF_OK || !(deleting || applied))
    return change_done(f, deleting, rc, applied);
  f->fence_rc = rc;
  f->fence_applied = applied;
  f->fence_state = f->state;
  f->state = XF__FENCE;
  f->script_retried = 0;
  return xf__flow_encode(f);
}

/* The fence's reply (or its failure: rc, an error reply): the write was
 * acknowledged, so the call ends as it did whatever came of the PING; a
 * failed fence is counted (stats.fence_failed), not returned. */
static xf__step fenced(xf__flow *f, int rc, xf__reply *r) {
  if (rc != XF_OK || (r && r->type == XF_REPLY_ERROR))
    f->rt->stats.fence_failed++;
  if (r)
    xf__reply_free(r);
  f->state = f->fence_state;
  return change_done(f, f->state == XF__DELETE, f->fence_rc, f->fence_applied);
}

xf__step xf__flow_fence_cut(xf__flow *f) { return fenced(f, XF_ECANCELED, NULL); }

int xf__flow_fencing(const xf__flow *f) { return f->state == XF__FENCE; }

xf__step xf__flow_fence_shared(xf__flow *f, int ok, int64_t now_ms) {
  f->input_ms = now_ms;
  return fenced(f, ok ? XF_OK : XF_EIO, NULL);
}

/* A renewal's reply: 1 renewed, 0 the lease is not the loader's any more. */
static xf__step renewed(xf__flow *f, int rc, xf__reply *r) {
  int applied = 0;
  if (rc == XF_OK)
    rc = xf__entry_parse_int(f->rt, r, "renew", &applied);
  if (rc == XF_OK && !applied)
    rc = xf__rt_fail(f->rt, XF_ESUPERSEDED, "the lease is not the loader's any more");
  f->token[0] = '\0'; /* nothing to release */
  xf__emit(f, XF_EV_LEASE_RENEWED, -1, 0, rc);
  return xf__flow_done(f, rc);
}

/* ---- inputs ------------------------------------------------------------------- */

void xf__flow_learn_clock(xf__flow *f, int64_t server_ms, int64_t now_ms) {
  if (!f->clock || server_ms <= 0)
    return;
  xf__clock_learn(f->clock, server_ms, f->sent_ms, now_ms);
}

xf__step xf__flow_reply(xf__flow *f, int rc, xf__reply *r, int64_t now_ms) {
  f->input_ms = now_ms;
  if (f->state == XF__FENCE) /* no script, and a cut wait ends as a failed fence */
    return fenced(f, rc, r);
  const xf__key *key = cmd_key(f);
  if (rc == XF_ECANCELED) { /* the interrupt cut a reply wait short */
    f->script_loading = 0;
    return xf__flow_cancel(f);
  }
  if (f->state == XF__BUMP && f->tag_fencing) /* a PING or a WAIT: no script */
    return xf__flow_tags_reply(f, rc, r, now_ms);
  int script = script_for(f->state);
  if (f->script_loading) { /* the reply to SCRIPT LOAD: resend the command */
    f->script_loading = 0;
    if (rc == XF_OK)
      rc = xf__script_loaded(f->rt, script, r);
    r = NULL;
    if (rc == XF_OK)
      return xf__flow_encode(f);
  } else if (rc == XF_OK && r->type == XF_REPLY_ERROR) {
    xf__reply_kind kind = xf__reply_classify(r);
    if (kind == XF_REPLY_WRONGTYPE && f->state == XF__READ && f->plain_read) {
      /* An entry of the other format (a rolling deploy: docs/design.md, "The entry
       * on Redis"): its own plain read; if the entry changed format again
       * in between, the read script, which reads both at once. */
      xf__reply_free(r);
      if (f->format_switched)
        f->plain_read = 0;
      f->format_switched = 1;
      f->read_format = f->read_format == XF_ENTRY_STRING ? XF_ENTRY_HASH : XF_ENTRY_STRING;
      f->script_retried = 0;
      int asked = f->asked;
      xf__step step = xf__flow_encode(f);
      f->cmd.ask_node = asked;
      return step;
    }
    /* e.g. after SCRIPT FLUSH: load it, then the command again (once) */
    if (kind == XF_REPLY_NOSCRIPT && !f->script_retried) {
      xf__reply_free(r);
      f->script_retried = f->script_loading = 1;
      xf__script_load_cmd(&f->cmd, script, key->data, key->len);
      return XF_STEP_SEND;
    }
    rc = xf__script_error(f->rt, script, r); /* unavailable, noperm, wrongtype... */
    r = NULL;
  }
  switch (f->state) {
  case XF__READ:
    return read_done(f, rc, r, now_ms);
  case XF__LEASE:
    return xf__flow_lease_done(f, rc, r, now_ms);
  case XF__WRITE:
  case XF__TOUCH:
  case XF__DELETE:
    return changed(f, rc, r);
  case XF__RENEW:
    return renewed(f, rc, r);
  case XF__TAGS:
  case XF__BUMP:
    return xf__flow_tags_reply(f, rc, r, now_ms);
  default:
    return xf__flow_released(f, r);
  }
}

int xf__flow_leasing(const xf__flow *f) { return f->state == XF__LEASE; }

int xf__flow_interrupted(const xf__flow *f) {
  return f->interrupt && f->interrupt(f->interrupt_ud) != 0;
}
