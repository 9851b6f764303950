-- delete: remove the entry (value and lease) and leave a tombstone, so that a
-- delete wins over every computation that started before it: its s = now
-- refuses their writes (write.lua's newer-wins rule), and a lease holder's
-- write is refused because its lease is gone.
-- KEYS[1] entry key. ARGV[1] how long the tombstone stays, ms.
-- Returns 1.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 's', string.format('%d', now))
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
