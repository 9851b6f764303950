-- entry_read: the read of one entry, shared by read.lua and read_many.lua
-- (cmake/embed_lua.cmake pastes this file where a script has the line
-- "--#include entry_read.lua", so both run the same per-key logic).
-- server_now() is the server's time in ms. read_entry(key, now) returns
-- {value, delta_us, remaining_ms, lease_live, negative, expiry_ms}, or
-- {false, 0, 0, lease_live, 0, now_ms} when there is no value. remaining_ms is
-- negative once the value is past its logical expiry; the server's time is
-- expiry_ms - remaining_ms (one field less to parse on every hit).
-- A malformed entry (e not a time within 2^41 ms of now: nan, inf, text) is a
-- miss; a malformed delta counts as 0, a huge one as 2^40 us.
local function server_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function read_entry(key, now)
  local f = redis.call('HMGET', key, 'v', 'd', 'e', 'l', 'n')
  local live = 0
  if f[4] then
    local deadline = tonumber(string.match(f[4], ':(%d+)$'))
    if deadline and deadline > now then live = 1 end
  end
  local e = tonumber(f[3])
  if not f[1] or not e or not (e > now - 2^41 and e < now + 2^41) then
    return {false, 0, 0, live, 0, now}
  end
  e = math.floor(e)
  local d = tonumber(f[2])
  d = (d and d > 0) and math.floor(math.min(d, 2^40)) or 0
  return {f[1], d, e - now, live, f[5] and 1 or 0, e}
end
