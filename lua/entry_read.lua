-- entry_read: how every script reads, judges and writes an entry
-- (cmake/embed_lua.cmake pastes this file where a script has the line
-- "--#include entry_read.lua", so every script judges an entry alike).
-- An entry is in one of two formats (README, "The entry on Redis"):
-- format 1, a hash (v d e s l n f); format 2, one string: a 40-byte header
-- (pack2 below) followed by the value's bytes. Every script reads both; what
-- a script creates is in the format its caller asks for.
-- server_now() is the server's time in ms.
-- entry(key, now) reads the entry and judges it: a field is malformed unless
-- it is as xfetch writes it (d, e, s and the lease's deadline within bounds:
-- d at most 2^40 us, e within 2^41 ms of now, s at most a day ahead of now
-- (clock skew), the deadline at most 2^40 ms ahead; n "1"; e present with v;
-- format 2: magic, version, flags and the zero fields their flags leave
-- unset). A malformed entry (t.bad: an old writer, a manual fix, another
-- tool) is a miss: t.v is false, its s is ignored and a malformed lease is
-- dead, so the next computation overwrites it instead of being refused
-- forever. A string that does not start with format 2's magic byte is not
-- an entry: the script fails with WRONGTYPE, as it does on a list or a set,
-- and leaves it untouched. t.v of a format-2 entry read without its value (header only) is
-- true: entry_value(key, t) fetches it.
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

-- Format 2's header: magic 0xF8, version 2, flags (1 value, 2 negative,
-- 4 lease, 8 s, 16 f), d (5 bytes: at most 2^40 - 1), e, s, lease deadline (6 bytes each),
-- lease token (8 bytes: the first 8 of SHA1(token)), f (6 bytes); integers
-- big-endian, a field whose flag is unset is zero.
local HEADER, LAYOUT, NO_TOKEN = 40, '>BBBI5I6I6I6c8I6', string.rep('\0', 8)

local function token_id(token)
  local hex = string.sub(redis.sha1hex(token), 1, 16)
  if string.match(token, '^~%x+$') and #token == 17 then hex = string.sub(token, 2) end
  return (string.gsub(hex, '..', function(h) return string.char(tonumber(h, 16)) end))
end

local function entry2(key, now, with_value)
  local raw
  if with_value then raw = redis.call('GET', key) else raw = redis.call('GETRANGE', key, 0, HEADER - 1) end
  local t = {kind = 'string', v = false, d = 0, live = 0, n = 0, bad = true}
  if string.byte(raw, 1) ~= 248 then -- not an xfetch entry: left untouched
    error({err = 'WRONGTYPE the key holds a string that is not an xfetch entry'})
  end
  if #raw < HEADER then return t end
  local magic, version, flags, d, e, s, dl, tok, f = struct.unpack(LAYOUT, raw)
  local has = function(bit) return math.floor(flags / bit) % 2 == 1 end
  if magic ~= 248 or version ~= 2 or flags >= 32 or (has(2) and not has(1)) or
     (not has(1) and (d ~= 0 or e ~= 0)) or (not has(8) and s ~= 0) or
     (not has(4) and (dl ~= 0 or tok ~= NO_TOKEN)) or (not has(16) and f ~= 0) or
     (not has(1) and (with_value and #raw or redis.call('STRLEN', key)) > HEADER) or (has(8) and s > now + 86400000) or
     dl > now + 2^40 or (has(1) and (e > now + 2^41 or e <= now - 2^41)) then
    return t
  end
  t.bad = false
  if has(4) then
    t.tok, t.deadline = tok, dl
    if dl > now then t.live = 1 end
  end
  if has(8) then t.s = s end
  if has(16) then t.f = f end
  if has(1) then
    t.v, t.d, t.e, t.n = true, d, e, has(2) and 1 or 0
    if with_value then t.v = string.sub(raw, HEADER + 1) end
  end
  return t
end

local function entry(key, now, with_value)
  local kind = redis.call('TYPE', key).ok
  if kind == 'string' then return entry2(key, now, with_value) end
  local f = redis.call('HMGET', key, 'v', 'd', 'e', 's', 'l', 'n', 'f')
  local t = {kind = kind, v = f[1], d = 0, l = f[5], live = 0, n = 0, bad = false}
  t.s = judge_uint(t, f[4], now + 86400000)
  t.f = tonumber(f[7])
  if f[5] then
    local deadline = judge_uint(t, string.match(f[5], ':([^:]*)$') or '', now + 2^40)
    t.lease_bad = not deadline
    t.deadline = deadline
    t.tok = string.match(f[5], '^(.*):[^:]*$')
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

local function entry_value(key, t)
  if t.v == true then return redis.call('GETRANGE', key, HEADER, -1) end
  return t.v
end

-- Whether the entry's lease is the one token took (a format-1 lease carried
-- into format 2 keeps its token's id, and back: "~<hex id>").
local function lease_mine(t, token)
  if token == '' or not t.tok then return false end
  if t.kind == 'string' then return t.tok == token_id(token) end
  return t.tok == token or t.tok == '~' .. string.gsub(token_id(token), '.', function(c)
    return string.format('%02x', string.byte(c))
  end)
end

-- The format-2 header of t (fields as entry() gives them; t.v true or a
-- string: the entry holds a value).
local function pack2(t)
  local flags = (t.v and 1 or 0) + (t.v and t.n == 1 and 2 or 0) + (t.deadline and 4 or 0) +
                (t.s and 8 or 0) + (t.f and 16 or 0)
  local tok = t.deadline and (t.kind == 'string' and t.tok or token_id(t.tok)) or NO_TOKEN
  return struct.pack(LAYOUT, 248, 2, flags, t.v and math.min(t.d, 2^40 - 1) or 0, t.v and t.e or 0, t.s or 0,
                     t.deadline or 0, tok, t.f or 0)
end

-- t's lease as format 1 writes it ("token:deadline"), or nil.
local function lease1(t)
  if not t.deadline then return nil end
  local tok = t.tok
  if t.kind == 'string' then
    tok = '~' .. string.gsub(tok, '.', function(c) return string.format('%02x', string.byte(c)) end)
  end
  return tok .. ':' .. string.format('%d', t.deadline)
end

local function read_entry(key, now)
  local t = entry(key, now, true)
  if not t.v then return {false, 0, 0, t.live, t.bad and 1 or 0, now} end
  return {t.v, t.d, t.e - now, t.live, t.n, t.e}
end
