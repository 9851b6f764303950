-- release: drop the caller's lease after a failed load, or after a load that
-- found nothing when not-found is not cached.
-- KEYS[1] entry key. ARGV[1] token. ARGV[2] found nothing: keep_ms ("0" =
-- not) for the marker f = the server's time now, which tells the callers
-- whose first read came before it (they waited on this lease) that the answer
-- is not-found (lease.lua); an entry holding only the marker expires after
-- keep_ms. ARGV[3] hold_ms ("0": none): a failed load that served the
-- entry's last good value turns its lease into the fail-safe mark (its token
-- FAILSAFE, entry_read.lua) for hold_ms instead (policy.failsafe_throttle_ms):
-- lease.lua answers 4 to every caller until it ends, so no one in the fleet
-- loads meanwhile; then the next caller takes the lease as usual. The rest
-- of the entry (value, tags' record) stays as it is. The entry keeps its
-- format (entry_read.lua).
-- Returns 1 released, 0 when the lease was not the caller's (expired, taken).
--#include entry_read.lua
local key, token, keep = KEYS[1], ARGV[1], tonumber(ARGV[2])
local now = server_now()
local t = entry(key, now)
if not lease_mine(t, token) then return 0 end
local hold = tonumber(ARGV[3]) or 0
if hold > 0 and t.v then
  if t.kind == 'string' then
    t.tok, t.deadline = token_id(FAILSAFE), now + hold
    put2(key, t)
  else
    redis.call('HSET', key, 'l', FAILSAFE .. ':' .. string.format('%d', now + hold))
  end
  local pttl = redis.call('PTTL', key)
  if pttl >= 0 and pttl < hold then redis.call('PEXPIRE', key, hold) end
  return 1
end
t.tok, t.deadline = nil, nil
if keep and keep > 0 then t.f = now end
if t.kind == 'string' then
  if not t.v and not t.s and not t.f then
    redis.call('DEL', key)
    return 1
  end
  put2(key, t) -- the slot stays: the next lease is in place
  if keep and keep > 0 and not t.v and not t.s then redis.call('PEXPIRE', key, keep) end
  return 1
end
redis.call('HDEL', key, 'l')
if keep and keep > 0 then
  redis.call('HSET', key, 'f', string.format('%d', now))
  if redis.call('HLEN', key) == 1 then redis.call('PEXPIRE', key, keep) end
  return 1
end
if redis.call('HLEN', key) == 0 then redis.call('DEL', key) end
return 1
