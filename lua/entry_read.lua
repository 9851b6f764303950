-- entry_read: how every script reads and judges an entry (cmake/embed_lua.cmake
-- pastes this file where a script has the line "--#include entry_read.lua",
-- so read, read_many, lease and write judge an entry alike).
-- server_now() is the server's time in ms.
-- entry(key, now) reads the entry's fields and judges them: a field is
-- malformed unless it is as xfetch writes it (d, e, s and the lease's deadline
-- plain decimal digits: d at most 2^40 us, e within 2^41 ms of now, s at most
-- a day ahead of now (clock skew), the deadline at most 2^40 ms ahead; n "1";
-- e present with v). A malformed entry (t.bad: an old writer, a manual fix,
-- another tool) is a miss: t.v is false, its s is ignored and a malformed
-- lease is dead, so the next computation overwrites it instead of being
-- refused forever.
-- read_entry(key, now) returns {value, delta_us, remaining_ms, lease_live,
-- negative, expiry_ms}, or {false, 0, 0, lease_live, malformed, now_ms} when
-- there is no value to serve (malformed 1: the entry is malformed).
-- remaining_ms is negative once the value is past its logical expiry; the
-- server's time is expiry_ms - remaining_ms (one field less to parse).
local function server_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- x as xfetch writes numbers: decimal digits, at most max. nil when absent;
-- when not so, nil and t is malformed.
local function judge_uint(t, x, max)
  if not x then return nil end
  local n = string.match(x, '^%d+$') and tonumber(x)
  if n and n <= max then return n end
  t.bad = true
  return nil
end

local function entry(key, now)
  local f = redis.call('HMGET', key, 'v', 'd', 'e', 's', 'l', 'n')
  local t = {v = f[1], d = 0, l = f[5], live = 0, n = 0, bad = false}
  t.s = judge_uint(t, f[4], now + 86400000)
  if f[5] then
    local deadline = judge_uint(t, string.match(f[5], ':([^:]*)$') or '', now + 2^40)
    t.lease_bad = not deadline
    if deadline and deadline > now then t.live = 1 end
  end
  if t.v then
    t.d = judge_uint(t, f[2], 2^40) or 0
    t.e = judge_uint(t, f[3] or '', now + 2^41)
    if not t.e or t.e <= now - 2^41 or (f[6] and f[6] ~= '1') then t.bad = true end
    t.n = f[6] and 1 or 0
  end
  if t.bad then t.v, t.d, t.e, t.n, t.s = false, 0, nil, 0, nil end
  return t
end

local function read_entry(key, now)
  local t = entry(key, now)
  if not t.v then return {false, 0, 0, t.live, t.bad and 1 or 0, now} end
  return {t.v, t.d, t.e - now, t.live, t.n, t.e}
end
