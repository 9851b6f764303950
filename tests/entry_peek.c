/* (entry_peek.h) lua/entry_read.lua with a return that hands its judgement
 * of one entry back as strings. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "entry_peek.h"
#include "fixture.h"

static const char tail[] =
    "\nlocal function num(x) return x and string.format('%d', x) or '' end\n"
    "local t = entry(KEYS[1], server_now(), true)\n"
    "local v = t.v and entry_value(KEYS[1], t) or nil\n"
    "return {t.kind, v and '1' or '0', v or '', num(t.d), num(t.e), num(t.s), num(t.f),\n"
    "        num(t.deadline), tostring(t.live), lease_mine(t, ARGV[1]) and '1' or '0',\n"
    "        tostring(t.n), t.bad and '1' or '0'}\n";

static char *script(void) {
  static char *text;
  if (text)
    return text;
  FILE *f = fopen(XFT_LUA_DIR "/entry_read.lua", "rb");
  cr_assert_not_null(f, "cannot read %s/entry_read.lua", XFT_LUA_DIR);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + sizeof tail);
  cr_assert_not_null(s);
  cr_assert_eq(fread(s, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  memcpy(s + n, tail, sizeof tail);
  return text = s; /* kept for the process */
}

static long long num(const redisReply *r) { return r->len ? atoll(r->str) : -1; }

void xft_peek_read(redisContext *r, const char *key, const char *token, xft_peek *out) {
  redisReply *rep = xft_cmd(r, "EVAL %s 1 %s %s", script(), key, token ? token : "");
  cr_assert_eq(rep->type, REDIS_REPLY_ARRAY, "peek at %s: %s", key,
               rep->type == REDIS_REPLY_ERROR ? rep->str : "not an array");
  cr_assert_eq(rep->elements, 12);
  redisReply **e = rep->element;
  memset(out, 0, sizeof *out);
  snprintf(out->kind, sizeof out->kind, "%s", e[0]->str);
  if (e[1]->str[0] == '1') {
    out->v = malloc(e[2]->len + 1);
    memcpy(out->v, e[2]->str, e[2]->len + 1);
    out->vlen = e[2]->len;
  }
  out->d = num(e[3]), out->e = num(e[4]), out->s = num(e[5]), out->f = num(e[6]);
  out->deadline = num(e[7]);
  out->live = atoi(e[8]->str), out->mine = atoi(e[9]->str);
  out->n = atoi(e[10]->str), out->bad = atoi(e[11]->str);
  freeReplyObject(rep);
}

void xft_peek_free(xft_peek *p) {
  free(p->v);
  p->v = NULL;
}
