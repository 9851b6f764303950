-- release: drop the caller's lease after a failed load, or after a load that
-- found nothing when not-found is not cached.
-- KEYS[1] entry key. ARGV[1] token. ARGV[2] (optional) found nothing: keep_ms
-- for the marker f = the server's time now, which tells the callers whose
-- first read came before it (they waited on this lease) that the answer is
-- not-found (lease.lua); a hash holding only the marker expires after keep_ms.
-- Returns 1 released, 0 when the lease was not the caller's (expired, taken).
local key, token, keep = KEYS[1], ARGV[1], tonumber(ARGV[2])
local l = redis.call('HGET', key, 'l')
if not l or string.sub(l, 1, #token + 1) ~= token .. ':' then return 0 end
redis.call('HDEL', key, 'l')
if keep and keep > 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('HSET', key, 'f', string.format('%d', now))
  if redis.call('HLEN', key) == 1 then redis.call('PEXPIRE', key, keep) end
  return 1
end
if redis.call('HLEN', key) == 0 then redis.call('DEL', key) end
return 1
