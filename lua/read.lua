#!lua flags=no-writes
-- read: everything the XFetch decision needs, in one round trip.
-- KEYS[1] entry key. Returns read_entry's fields (lua/entry_read.lua), then
-- the value of each further key, in order (a tagged read on one node: its
-- tags' versions with the entry; nil for a key that does not exist).
--#include entry_read.lua
local t = read_entry(KEYS[1], server_now())
for i = 2, #KEYS do
  t[#t + 1] = redis.call('GET', KEYS[i])
end
return t
