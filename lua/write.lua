-- write: store a computed value atomically and clear the caller's lease.
-- KEYS[1] entry key. ARGV[1] token ("" = no lease), ARGV[2] value,
-- ARGV[3] delta_us ("" = keep the entry's, e.g. for a write-through),
-- ARGV[4] ttl_ms, ARGV[5] stale_ms, ARGV[6] start_ms
-- ("" = now), ARGV[7] "1" for a negative entry else "0".
-- Returns 1 written, 0 refused because the entry holds a newer computation.
local key, token = KEYS[1], ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local start = tonumber(ARGV[6]) or now
local f = redis.call('HMGET', key, 's', 'l', 'd')
local mine = token ~= '' and f[2] ~= false and string.sub(f[2], 1, #token + 1) == token .. ':'
if mine then redis.call('HDEL', key, 'l') end
local s_old = tonumber(f[1])
if s_old and s_old > start then
  if redis.call('HLEN', key) == 0 then redis.call('DEL', key) end
  return 0
end
local ttl = tonumber(ARGV[4])
local delta = ARGV[3] ~= '' and ARGV[3] or (f[3] or '0')
redis.call('HSET', key, 'v', ARGV[2], 'd', delta, 'e', string.format('%d', now + ttl),
           's', string.format('%d', start))
if ARGV[7] == '1' then redis.call('HSET', key, 'n', '1') else redis.call('HDEL', key, 'n') end
redis.call('PEXPIRE', key, ttl + tonumber(ARGV[5]))
return 1
