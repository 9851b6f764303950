-- delete: remove the entry (value and lease) and leave a tombstone, so that a
-- delete wins over every computation that started before it: its s = now
-- refuses their writes (write.lua's newer-wins rule), and a lease holder's
-- write is refused because its lease is gone.
-- KEYS[1] entry key. ARGV[1] how long the tombstone stays, ms. ARGV[2] the
-- tombstone's format ("1" a hash holding s, "2" a header-only string).
-- Returns 1. A key that is not an xfetch entry (entry_read.lua) is left as it
-- is: WRONGTYPE.
--#include entry_read.lua
local now = server_now()
entry(KEYS[1], now) -- a key that is not an entry fails here (WRONGTYPE), untouched
redis.call('DEL', KEYS[1])
if ARGV[2] == '1' then
  redis.call('HSET', KEYS[1], 's', string.format('%d', now))
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
else
  redis.call('SET', KEYS[1], pack2({kind = 'string', s = now}), 'PX', ARGV[1])
end
return 1
