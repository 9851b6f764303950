-- entry_read: how every script reads, judges and writes an entry
-- (cmake/embed_lua.cmake pastes this file where a script has the line
-- "--#include entry_read.lua", so every script judges an entry alike).
-- An entry is in one of two formats (README, "The entry on Redis"):
-- format 1, a hash (v d e s l n f); format 2, one string: a header of 14 to
-- 40 bytes (pack2 below) followed by the value's bytes. Every script reads
-- both; what a script creates is in the format its caller asks for.
-- server_now() is the server's time in ms.
-- entry(key, now) reads the entry and judges it: a field is malformed unless
-- it is as xfetch writes it (d, e, s and the lease's deadline within bounds:
-- d at most 2^40 us, e within 2^41 ms of now, s at most a day ahead of now
-- (clock skew), the deadline at most 2^40 ms ahead; n "1"; e present with v;
-- format 2: magic, version 3 (4 with a tag record), flags, the fields they
-- announce all there and a lease slot without a lease zero). A malformed entry (t.bad: an old
-- writer, a manual fix, another tool) is a miss: t.v is false, its s is
-- ignored and a malformed lease is dead, so the next computation overwrites
-- it instead of being refused forever. A string that does not start with
-- format 2's magic byte is not an entry: the script fails with WRONGTYPE, as
-- it does on a list or a set, and leaves it untouched; so does a hash that
-- holds any field but v d e s l n f (one with none of them among it: another
-- program's hash). A hash whose fields are all among them is an entry,
-- malformed or not. t.v of an entry read without its value (header only:
-- format 2's GETRANGE of the header, format 1's HMGET of the other fields)
-- is true: entry_value(key, t) fetches it (t.hlen: a format-2 header's
-- length), so a script that does not need the value never copies it.
-- read_entry(key, now) returns {value, delta_us, remaining_ms, lease_live,
-- negative, expiry_ms, nothing_ms, tags, start_ms, validator}, or {false, 0, 0,
-- lease_live, malformed, now_ms, nothing_ms, '', 0, ''} when there is no value to serve
-- (malformed 1: the entry is malformed); tags: the entry's tag record ('' for
-- none), opaque here (the client writes and judges it: policy.tags). remaining_ms is negative once the value is past its logical
-- expiry; the server's time is expiry_ms - remaining_ms (one field less to
-- parse). nothing_ms is the marker f (0: none): when the last load that found
-- nothing, not cached, ended (release.lua), so that a caller that waited on
-- it and reads again knows its answer, whoever holds the lease by then.
-- start_ms is the entry's s (0: none): when the computation (or the
-- revalidation: touch.lua) of its value started, for the value's age;
-- validator: the entry's validator record ('' for none).
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

-- Format 2's header (version 3): a fixed part, magic 0xF8, version 3, flags
-- (1 value, 2 negative, 4 lease, 8 s, 16 f, 32 lease slot), d (5 bytes: at
-- most 2^40 - 1), e (6 bytes); then, each only when its flag is set, in this
-- order: s (6 bytes), f (6 bytes), the lease slot: deadline (6 bytes) and
-- token (8 bytes: the first 8 of SHA1(token)). Integers big-endian; d and e
-- are zero without a value, a slot without a lease is zero. A value of SLOT_AT
-- bytes or more is written with the slot, so that a lease rewrites only the
-- header (SETRANGE); a smaller one gets it from its first lease (the string
-- rewritten, its value copied: a few dozen bytes) and keeps it until its next
-- write. Flag 64 (version 4): a tag record follows, last: its length (1
-- byte, at most 255) then its bytes, written by the client (the versions of
-- the entry's tags as they were before its loader ran) and kept as is by
-- every script until the next write; version 3 never has flag 64, version 4
-- always has it, so a version-3 reader (a client that knows no tags) judges a
-- tagged entry malformed: a miss, recomputed and overwritten untagged.
-- Flag 128 (version 5, tagged or not): the value is a zstd frame (the
-- client's src/core/codec.c; scripts never look inside it), never with flag
-- 2; a reader of versions 3 and 4 judges it malformed, never serves the frame
-- as a value. read_entry's fifth field says so: 2.
-- Versions 6, 7 and 8 are versions 3, 4 and 5 with a validator record last
-- (after the tag record): its length (1 byte, 1 to 255) then its bytes, opaque
-- (a loader's, e.g. an ETag: xf_sink_validator), only with a value, kept by
-- every script but write.lua (which writes the new one); a reader of versions
-- 3 to 5 judges it malformed: a miss, never a wrong value.
-- Another version (2: an unreleased 40-byte layout) is malformed.
local FIXED, HEADER_MAX, SLOT_AT, NO_TOKEN = 14, 40 + 256 + 256, 256, string.rep('\0', 8)
-- The token of the fail-safe mark (release.lua): a lease no caller holds,
-- taken by a failed load's release for policy.failsafe_throttle_ms; callers'
-- tokens are random and never this.
local FAILSAFE = 'xf:failsafe'
local BIG_AT = 4096 -- set2 below: where it starts to pay (bench/README.md, "Write cost")

-- raw: the string's first bytes, for the tag and validator records' lengths
-- (nil past them); validated: the header has a validator record.
local function header_len(flags, raw, validated)
  local has = function(bit) return math.floor(flags / bit) % 2 == 1 end
  local n = FIXED + (has(8) and 6 or 0) + (has(16) and 6 or 0) + (has(32) and 14 or 0)
  for _, here in ipairs({has(64), validated}) do
    if here then
      local len = string.byte(raw, n + 1)
      if not len then return nil end
      n = n + 1 + len
    end
  end
  return n
end

local function token_id(token)
  local hex = string.sub(redis.sha1hex(token), 1, 16)
  if string.match(token, '^~%x+$') and #token == 17 then hex = string.sub(token, 2) end
  return (string.gsub(hex, '..', function(h) return string.char(tonumber(h, 16)) end))
end

local function entry2(key, now, with_value)
  local raw
  if with_value then raw = redis.call('GET', key) else raw = redis.call('GETRANGE', key, 0, HEADER_MAX - 1) end
  local t = {kind = 'string', v = false, d = 0, live = 0, n = 0, bad = true}
  if string.byte(raw, 1) ~= 248 then -- not an xfetch entry: left untouched
    error({err = 'WRONGTYPE the key holds a string that is not an xfetch entry'})
  end
  if #raw < FIXED then return t end
  local _, version, flags, d, e = struct.unpack('>BBBI5I6', raw)
  local has = function(bit) return math.floor(flags / bit) % 2 == 1 end
  local tagged, zstd = has(64), has(128)
  local base = zstd and 5 or tagged and 4 or 3
  local validated = version == base + 3
  local hlen = header_len(flags, raw, validated)
  if not hlen or (version ~= base and not validated) or #raw < hlen then return t end
  local at, s, f, dl, tok = FIXED + 1, nil, nil, 0, NO_TOKEN
  if has(8) then s, at = struct.unpack('>I6', raw, at) end
  if has(16) then f, at = struct.unpack('>I6', raw, at) end
  if has(32) then dl, tok, at = struct.unpack('>I6c8', raw, at) end
  if tagged then
    local len = string.byte(raw, at)
    t.tags, at = string.sub(raw, at + 1, at + len), at + 1 + len
  end
  if validated then t.x = string.sub(raw, at + 1, hlen) end
  if (validated and (not has(1) or #t.x == 0)) or (has(2) and not has(1)) or (tagged and not has(1)) or (zstd and (has(2) or not has(1))) or (has(4) and not has(32)) or (not has(1) and (d ~= 0 or e ~= 0)) or
     (not has(4) and (dl ~= 0 or tok ~= NO_TOKEN)) or
     (not has(1) and (with_value and #raw or redis.call('STRLEN', key)) > hlen) or (s and s > now + 86400000) or
     dl > now + 2^40 or (has(1) and (e > now + 2^41 or e <= now - 2^41)) then
    return t
  end
  t.bad, t.hlen, t.slot = false, hlen, has(32)
  if has(4) then
    t.tok, t.deadline = tok, dl
    if dl > now then t.live = 1 end
  end
  t.s, t.f = s, f
  if has(1) then
    t.v, t.d, t.e, t.n, t.z = true, d, e, has(2) and 1 or 0, zstd
    if with_value then t.v = string.sub(raw, hlen + 1) end
  end
  return t
end

local function entry(key, now, with_value)
  local kind = redis.call('TYPE', key).ok
  if kind == 'string' then return entry2(key, now, with_value) end
  local f
  if with_value then
    f = redis.call('HMGET', key, 'v', 'd', 'e', 's', 'l', 'n', 'f')
  else -- the header fields only: v's bytes stay on the server (entry_value)
    f = redis.call('HMGET', key, 'd', 'e', 's', 'l', 'n', 'f')
    table.insert(f, 1, redis.call('HEXISTS', key, 'v') == 1)
  end
  if kind == 'hash' then -- a field xfetch never writes: not an entry, left untouched
    local ours = 0
    for i = 1, 7 do if f[i] then ours = ours + 1 end end
    if redis.call('HLEN', key) > ours then
      error({err = 'WRONGTYPE the key holds a hash that is not an xfetch entry'})
    end
  end
  local t = {kind = kind, v = f[1], d = 0, l = f[5], live = 0, n = 0, bad = false}
  t.s = judge_uint(t, f[4], now + 86400000)
  t.f = judge_uint({}, f[7], now + 86400000) -- a marker not as written is none, not malformed
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
  if t.v ~= true then return t.v end
  if t.kind == 'hash' then return redis.call('HGET', key, 'v') end
  return redis.call('GETRANGE', key, t.hlen, -1)
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
-- string: the entry holds a value; t.slot: keep the lease slot, also when no
-- lease is held).
local function pack2(t)
  local slot = t.slot or t.deadline ~= nil
  local tags = t.v and t.tags and #t.tags > 0 and t.tags
  local zstd = t.v and t.z
  local x = t.v and t.x and #t.x > 0 and t.x
  local flags = (t.v and 1 or 0) + (t.v and t.n == 1 and 2 or 0) + (t.deadline and 4 or 0) +
                (t.s and 8 or 0) + (t.f and 16 or 0) + (slot and 32 or 0) + (tags and 64 or 0) +
                (zstd and 128 or 0)
  local version = (zstd and 5 or tags and 4 or 3) + (x and 3 or 0)
  local h = struct.pack('>BBBI5I6', 248, version, flags, t.v and math.min(t.d, 2^40 - 1) or 0,
                        t.v and t.e or 0)
  if t.s then h = h .. struct.pack('>I6', t.s) end
  if t.f then h = h .. struct.pack('>I6', t.f) end
  if slot then
    local tok = t.deadline and (t.kind == 'string' and t.tok or token_id(t.tok)) or NO_TOKEN
    h = h .. struct.pack('>I6c8', t.deadline or 0, tok)
  end
  if tags then h = h .. string.char(#tags) .. tags end
  if x then h = h .. string.char(#x) .. x end
  return h
end

-- Rewrites the header of the format-2 entry key (t as entry() read it, then
-- changed) with pack2(t): in place when its length is the same, else the
-- string is rewritten (its value copied once), its TTL kept.
local function put2(key, t)
  local h = pack2(t)
  if #h == t.hlen then
    redis.call('SETRANGE', key, 0, h)
  else
    redis.call('SET', key, h .. (t.v and entry_value(key, t) or ''), 'KEEPTTL')
  end
  t.hlen = #h
end

-- Makes key (of type kind: 'none', 'string' or 'hash', replaced) the
-- format-2 entry h .. value that lives px ms. Lua's `..` copies a value twice
-- (its buffer, then the new string, whose every byte Lua hashes to intern it)
-- before SET copies it once more: from BIG_AT bytes the string is instead
-- made at its final length by SETRANGE past the header on the deleted key
-- (one allocation of exactly that size, as SET makes: APPEND or SETRANGE on
-- the old string would grow it greedily, up to twice its size) and the header
-- written in place; the same bytes, the same memory, half the server time or
-- less from 100 KiB (bench/README.md, "Write cost"). The no-op SETRANGE first
-- is checked against maxmemory as SET would be (DEL is not, and a script's
-- writes after its first are not either); a string longer than SETRANGE may
-- make (proto-max-bulk-len) is SET, and so is a hash converted (SETRANGE
-- would fail on it: WRONGTYPE).
local function set2(key, kind, h, value, px)
  if #value >= BIG_AT and kind ~= 'hash' then
    redis.call('SETRANGE', key, 0, '')
    redis.call('DEL', key)
    local made = redis.pcall('SETRANGE', key, #h, value)
    if type(made) ~= 'table' or not made.err then
      redis.call('SETRANGE', key, 0, h)
      redis.call('PEXPIRE', key, px)
      return
    end
  end
  redis.call('SET', key, h .. value, 'PX', px)
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
  local f = t.f or 0
  if not t.v then return {false, 0, 0, t.live, t.bad and 1 or 0, now, f, '', 0, ''} end
  return {t.v, t.d, t.e - now, t.live, t.z and 2 or t.n, t.e, f, t.tags or '', t.s or 0, t.x or ''}
end
