-- write: store a computed result atomically and clear the caller's lease.
-- KEYS[1] entry key. ARGV[1] token ("" = no lease held), ARGV[2] value,
-- ARGV[3] delta_us ("" = keep the entry's, e.g. for a write-through),
-- ARGV[4] ttl_ms, ARGV[5] keep_ms (how long past ttl the entry stays: the
-- larger of the stale and stale-if-error windows), ARGV[6] start_ms ("" = now),
-- ARGV[7] kind: "0" a value, "3" a value that is a zstd frame (format 2
-- only: the header's flag 128, entry_read.lua), "1" a cached not-found, "2" gone (the loader found
-- nothing and not-found is not cached: the old value is removed and a tombstone
-- with s = start_ms stays for ARGV[4] ms, with the found-nothing marker f = now
-- for the callers that waited on this load: see release.lua), ARGV[8] the
-- format written ("1" a hash, "2" a string; an entry of the other format is
-- converted, another caller's live lease carried over), ARGV[9] the tag
-- record of a value (format 2 only: at most 255 bytes, '' = none; the
-- header's flag 64, entry_read.lua), ARGV[10] the value's validator (format
-- 2 only: at most 255 bytes, '' or absent = none; entry_read.lua's versions 6
-- to 8).
-- Returns 1 written, 0 refused: the entry holds a newer computation (its s is
-- later than start_ms, e.g. a delete's tombstone or an xf_set), or the caller's
-- lease is no longer the entry's (a delete or a write dated now, an xf_set,
-- removed it, or another caller took it over after it ran out). A lease holder whose whole entry is gone may
-- still write: nothing newer was written. A malformed entry is overwritten
-- (its malformed s refuses nothing) and a malformed lease dropped. A format-2
-- value of BIG_AT bytes or more is written without concatenating it to its
-- header in Lua (entry_read.lua's set2).
--#include entry_read.lua
local key, token, kind, format = KEYS[1], ARGV[1], ARGV[7], ARGV[8]
local now = server_now()
local start = tonumber(ARGV[6]) or now
local t = entry(key, now) -- a malformed s is ignored (entry_read.lua)
local mine = lease_mine(t, token)
if mine or t.lease_bad then
  t.tok, t.deadline = nil, nil
  if t.kind == 'hash' then redis.call('HDEL', key, 'l') end
  if t.kind == 'string' and mine then put2(key, t) end -- in place: the slot stays
end
if (t.s and t.s > start) or (token ~= '' and not mine and redis.call('EXISTS', key) == 1) then
  return 0
end
if t.bad then t = {kind = t.kind} end
if ARGV[6] == '' and t.tok then
  -- Dated now (an xf_set): every computation under way started at or before
  -- it, in its millisecond maybe: their lease ends, so their writes are refused.
  t.tok, t.deadline = nil, nil
  if t.kind == 'hash' then redis.call('HDEL', key, 'l') end
end
local ttl = tonumber(ARGV[4])
if kind == '2' then
  local pttl = redis.call('PTTL', key)
  if pttl < ttl then pttl = ttl end
  if format == '2' then
    t.v, t.s, t.f, t.slot = false, start, now, nil
    redis.call('SET', key, pack2(t), 'PX', pttl)
    return 1
  end
  local l = t.kind ~= 'hash' and lease1(t)
  if t.kind == 'string' then redis.call('DEL', key) end
  redis.call('HDEL', key, 'v', 'd', 'e', 'n')
  redis.call('HSET', key, 's', string.format('%d', start), 'f', string.format('%d', now))
  if l then redis.call('HSET', key, 'l', l) end
  redis.call('PEXPIRE', key, pttl)
  return 1
end
local delta = ARGV[3] ~= '' and tonumber(ARGV[3]) or t.d
delta = (delta and delta > 0) and math.floor(math.min(delta, 2^40)) or 0
if format == '2' then
  t.v, t.d, t.e, t.s, t.n, t.z = true, delta, now + ttl, start, kind == '1' and 1 or 0, kind == '3'
  t.tags = ARGV[9] ~= '' and string.sub(ARGV[9], 1, 255) or nil
  t.x = ARGV[10] and ARGV[10] ~= '' and string.sub(ARGV[10], 1, 255) or nil
  t.slot = #ARGV[2] >= SLOT_AT -- its leases then rewrite the header only (entry_read.lua)
  set2(key, t.kind, pack2(t), ARGV[2], ttl + tonumber(ARGV[5]))
  return 1
end
if kind == '3' then return redis.error_reply('ERR a compressed value is written in format 2 only') end
local l, f = t.kind ~= 'hash' and lease1(t), t.kind ~= 'hash' and t.f
if t.kind == 'string' then redis.call('DEL', key) end
redis.call('HSET', key, 'v', ARGV[2], 'd', string.format('%d', delta),
           'e', string.format('%d', now + ttl), 's', string.format('%d', start))
if l then redis.call('HSET', key, 'l', l) end
if f then redis.call('HSET', key, 'f', string.format('%d', f)) end
if kind == '1' then redis.call('HSET', key, 'n', '1') else redis.call('HDEL', key, 'n') end
redis.call('PEXPIRE', key, ttl + tonumber(ARGV[5]))
return 1
