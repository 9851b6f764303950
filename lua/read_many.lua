#!lua flags=no-writes
-- read_many: the reads of many entries in one call (the batch driver's first
-- round). KEYS: the entry keys (in Redis Cluster, all of one slot).
-- Returns one element per key, in KEYS order: read.lua's reply for that key
-- (read_entry's fields, lua/entry_read.lua), all read at one server time;
-- or, for a key read.lua would fail on (WRONGTYPE), that error, so that the
-- other keys are still served.
--#include entry_read.lua
local now, out = server_now(), {}
for i = 1, #KEYS do
  local ok, r = pcall(read_entry, KEYS[i], now)
  if not ok then r = {err = type(r) == 'table' and r.err or tostring(r)} end
  out[i] = r
end
return out
