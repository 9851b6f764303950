#!lua flags=no-writes
-- read: everything the XFetch decision needs, in one round trip.
-- KEYS[1] entry key. Returns read_entry's seven fields (lua/entry_read.lua).
--#include entry_read.lua
return read_entry(KEYS[1], server_now())
