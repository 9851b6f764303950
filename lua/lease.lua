-- lease: take the key's lease unless a live one exists.
-- KEYS[1] entry key. ARGV[1] token, ARGV[2] lease_ms, ARGV[3] the expiry_ms
-- the caller read ("0" if none), ARGV[4] the server time of the caller's
-- first read (optional).
-- Returns {1, now_ms} won (also when the lease is already this token's: a
-- retried request); {0, now_ms} lost (a live lease exists); {2, now_ms, value,
-- delta_us, remaining_ms, 0, negative, expiry_ms} when a newer valid
-- value was written since the caller's read: use it, load nothing; {3, now_ms}
-- when a load that found nothing (not cached) ended after the caller's first
-- read (field f, release.lua / write.lua): the caller came during that load,
-- its answer is that not-found. The entry is judged as the read script judges
-- it (a malformed lease is dead).
--#include entry_read.lua
local key, token, lease_ms = KEYS[1], ARGV[1], tonumber(ARGV[2])
local now = server_now()
local t = entry(key, now)
if t.v and t.e > now and t.e ~= tonumber(ARGV[3]) then
  return {2, now, t.v, t.d, t.e - now, 0, t.n, t.e}
end
if t.l and string.sub(t.l, 1, #token + 1) == token .. ':' then return {1, now} end
if t.live == 1 then return {0, now} end
local nothing, first_read = tonumber(redis.call('HGET', key, 'f')), tonumber(ARGV[4])
if nothing and first_read and nothing > first_read then return {3, now} end
redis.call('HSET', key, 'l', token .. ':' .. string.format('%d', now + lease_ms))
-- The entry must outlive the lease, or it would vanish with the lease mid-load
-- and let a second caller in. A lease-only hash gets exactly the lease's TTL.
local pttl = redis.call('PTTL', key)
if (pttl == -1 and redis.call('HLEN', key) == 1) or (pttl >= 0 and pttl < lease_ms) then
  redis.call('PEXPIRE', key, lease_ms)
end
return {1, now}
