-- lease: take the key's lease unless a live one exists.
-- KEYS[1] entry key. ARGV[1] token, ARGV[2] lease_ms, ARGV[3] the expiry_ms
-- the caller read ("0" if none), ARGV[4] the server time of the caller's
-- first read ("0" if none), ARGV[5] the format a new entry takes ("1" a hash,
-- "2" a string; an existing entry keeps its own, and a value of SLOT_AT bytes
-- or more is not copied: entry_read.lua).
-- Returns {1, now_ms} won (also when the lease is already this token's: a
-- retried request); {0, now_ms} lost (a live lease exists); {2, now_ms, value,
-- delta_us, remaining_ms, 0, negative, expiry_ms, nothing_ms, tags} when a newer
-- valid value was written since the caller's read: use it, load nothing (the
-- fields of read_entry, entry_read.lua); {3, now_ms} when a load that found
-- nothing (not cached) ended after the caller's first read (field f,
-- release.lua / write.lua): the caller came during that load, its answer is
-- that not-found, even when another caller has taken the lease since; {4,
-- now_ms} lost to the fail-safe mark (release.lua): a load failed lately,
-- serve the last good value rather than wait or load. The
-- entry is judged as the read script judges it (a malformed lease is dead).
--#include entry_read.lua
local key, token, lease_ms = KEYS[1], ARGV[1], tonumber(ARGV[2])
local now = server_now()
local t = entry(key, now)
if t.v and t.e > now and t.e ~= tonumber(ARGV[3]) then
  return {2, now, entry_value(key, t), t.d, t.e - now, 0, t.z and 2 or t.n, t.e, t.f or 0, t.tags or ''}
end
if lease_mine(t, token) then return {1, now} end
local first_read = tonumber(ARGV[4])
if t.f and first_read and first_read > 0 and t.f > first_read then return {3, now} end
if t.live == 1 then return {lease_mine(t, FAILSAFE) and 4 or 0, now} end
-- The entry must outlive the lease, or it would vanish with the lease mid-load
-- and let a second caller in. A lease-only entry gets exactly the lease's TTL.
local only_lease
if t.kind == 'hash' or (t.kind == 'none' and ARGV[5] == '1') then
  redis.call('HSET', key, 'l', token .. ':' .. string.format('%d', now + lease_ms))
  only_lease = redis.call('HLEN', key) == 1
elseif t.kind == 'none' or t.bad then -- a new string, or one replacing a malformed
  -- string (its bytes are no entry's): the lease only
  t = {kind = 'string', tok = token_id(token), deadline = now + lease_ms}
  redis.call('SET', key, pack2(t), 'PX', lease_ms)
  return {1, now}
else -- the header only when it has the lease slot (a value of SLOT_AT bytes or
  -- more, or leased before): the value is not copied; else the string is
  -- rewritten with the slot (entry_read.lua's put2)
  t.tok, t.deadline = token_id(token), now + lease_ms
  put2(key, t)
  only_lease = not t.v and not t.s and not t.f
end
local pttl = redis.call('PTTL', key)
if (pttl == -1 and only_lease) or (pttl >= 0 and pttl < lease_ms) then
  redis.call('PEXPIRE', key, lease_ms)
end
return {1, now}
