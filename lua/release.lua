-- release: drop the caller's lease after a failed load; nothing else changes.
-- KEYS[1] entry key. ARGV[1] token.
-- Returns 1 released, 0 when the lease was not the caller's (expired, taken).
local key, token = KEYS[1], ARGV[1]
local l = redis.call('HGET', key, 'l')
if not l or string.sub(l, 1, #token + 1) ~= token .. ':' then return 0 end
redis.call('HDEL', key, 'l')
if redis.call('HLEN', key) == 0 then redis.call('DEL', key) end
return 1
