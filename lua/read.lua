#!lua flags=no-writes
-- read: everything the XFetch decision needs, in one round trip.
-- KEYS[1] entry key.
-- Returns {value|nil, delta_us, remaining_ms, lease_live, negative, expiry_ms}.
-- remaining_ms is negative once the value is past its logical expiry.
local f = redis.call('HMGET', KEYS[1], 'v', 'd', 'e', 'l', 'n')
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = 0
if f[4] then
  local deadline = tonumber(string.match(f[4], ':(%d+)$'))
  if deadline and deadline > now then live = 1 end
end
local e = tonumber(f[3])
if not f[1] or not e then
  return {false, 0, 0, live, 0, 0}
end
return {f[1], tonumber(f[2]) or 0, e - now, live, f[5] and 1 or 0, e}
