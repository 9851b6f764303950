-- touch: the loader found the entry's value unchanged at its source; the
-- value stays as it is (never rewritten, never copied), its life is extended
-- as a write's would be, and the caller's lease cleared.
-- KEYS[1] entry key. ARGV[1] token ("" = no lease held), ARGV[2] seen_e: the
-- expiry e of the entry whose value the loader judged (the one it was given;
-- every write and touch sets e, as lease.lua's seen expiry),
-- ARGV[3] ttl_ms, ARGV[4] keep_ms (as write.lua), ARGV[5] start_ms ("" =
-- now), ARGV[6] the tag record (format 2 only, '' = keep the entry's). The
-- entry's delta is kept: it is the time of a full load, which a revalidation
-- does not measure.
-- Returns 1 touched, 0 refused: the entry no longer holds the value the
-- loader judged (a write or a delete came since: its e is not seen_e, or no
-- value, or a cached not-found, or a newer s), or the caller's lease is no longer the
-- entry's (as write.lua). A refused touch changes nothing but clearing the
-- caller's own lease.
--#include entry_read.lua
local key, token = KEYS[1], ARGV[1]
local now = server_now()
local start = tonumber(ARGV[5]) or now
local t = entry(key, now)
local mine = lease_mine(t, token)
if token ~= '' and not mine then return 0 end
if mine then t.tok, t.deadline = nil, nil end
local same = t.v and not t.bad and t.n == 0 and t.e ~= nil and
             string.format('%d', t.e) == ARGV[2] and not (t.s and t.s > start)
if not same then
  if mine then
    if t.kind == 'hash' then redis.call('HDEL', key, 'l') else put2(key, t) end
  end
  return 0
end
local ttl = tonumber(ARGV[3])
if t.kind == 'hash' then
  redis.call('HSET', key, 'e', string.format('%d', now + ttl), 's', string.format('%d', start))
  if mine then redis.call('HDEL', key, 'l') end
else
  t.e, t.s = now + ttl, start
  if ARGV[6] ~= '' then t.tags = string.sub(ARGV[6], 1, 255) end
  put2(key, t) -- in place when the header keeps its length: the value is not copied
end
redis.call('PEXPIRE', key, ttl + tonumber(ARGV[4]))
return 1
