-- write: store a computed result atomically and clear the caller's lease.
-- KEYS[1] entry key. ARGV[1] token ("" = no lease held), ARGV[2] value,
-- ARGV[3] delta_us ("" = keep the entry's, e.g. for a write-through),
-- ARGV[4] ttl_ms, ARGV[5] keep_ms (how long past ttl the entry stays: the
-- larger of the stale and stale-if-error windows), ARGV[6] start_ms ("" = now),
-- ARGV[7] kind: "0" a value, "1" a cached not-found, "2" gone (the loader found
-- nothing and not-found is not cached: the old value is removed and a tombstone
-- with s = start_ms stays for ARGV[4] ms, with the found-nothing marker f = now
-- for the callers that waited on this load: see release.lua).
-- Returns 1 written, 0 refused: the entry holds a newer computation (its s is
-- later than start_ms, e.g. a delete's tombstone or an xf_set), or the caller's
-- lease is no longer the entry's (a delete removed it, or another caller took
-- it over after it ran out). A lease holder whose whole entry is gone may
-- still write: nothing newer was written. A malformed entry is overwritten
-- (its malformed s refuses nothing) and a malformed lease dropped.
--#include entry_read.lua
local key, token, kind = KEYS[1], ARGV[1], ARGV[7]
local now = server_now()
local start = tonumber(ARGV[6]) or now
local t = entry(key, now) -- a malformed s is ignored (entry_read.lua)
local mine = token ~= '' and t.l and string.sub(t.l, 1, #token + 1) == token .. ':'
if mine or t.lease_bad then redis.call('HDEL', key, 'l') end
if (t.s and t.s > start) or (token ~= '' and not mine and redis.call('EXISTS', key) == 1) then
  return 0
end
local ttl = tonumber(ARGV[4])
if kind == '2' then
  redis.call('HDEL', key, 'v', 'd', 'e', 'n')
  redis.call('HSET', key, 's', string.format('%d', start), 'f', string.format('%d', now))
  if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl) end
  return 1
end
local delta = ARGV[3] ~= '' and tonumber(ARGV[3]) or t.d
delta = (delta and delta > 0) and math.floor(math.min(delta, 2^40)) or 0
redis.call('HSET', key, 'v', ARGV[2], 'd', string.format('%d', delta),
           'e', string.format('%d', now + ttl), 's', string.format('%d', start))
if kind == '1' then redis.call('HSET', key, 'n', '1') else redis.call('HDEL', key, 'n') end
redis.call('PEXPIRE', key, ttl + tonumber(ARGV[5]))
return 1
