-- renew: keep the caller's lease while its loader runs (policy.max_load_ms).
-- KEYS[1] entry key. ARGV[1] token, ARGV[2] lease_ms: the lease's deadline
-- becomes now + lease_ms, and an entry that would expire sooner lives that
-- long (as lease.lua). Only the caller's own lease is renewed (guarded by its
-- token, as write.lua is): one taken over or removed by a delete stays as it
-- is. The entry keeps its format; a format-2 entry's header is rewritten in
-- place (a lease has its slot: entry_read.lua), every other field of it (the
-- tags' record too) as it was.
-- Returns 1 renewed, 0 when the lease is not the caller's.
--#include entry_read.lua
local key, token, lease_ms = KEYS[1], ARGV[1], tonumber(ARGV[2])
local now = server_now()
local t = entry(key, now)
if not lease_mine(t, token) then return 0 end
if t.kind == 'hash' then
  redis.call('HSET', key, 'l', t.tok .. ':' .. string.format('%d', now + lease_ms))
else
  t.deadline = now + lease_ms
  put2(key, t)
end
local pttl = redis.call('PTTL', key)
if pttl >= 0 and pttl < lease_ms then redis.call('PEXPIRE', key, lease_ms) end
return 1
