-- tag_read: the current version of a tag (policy.tags), read before a call
-- loads or writes. KEYS[1] the tag's key. A tag never seen (or whose key
-- was evicted or flushed) gets a version first: the server's time in us,
-- above every version it could have had, so that an entry that recorded an
-- older one is never current again. Returns the version, decimal digits.
-- ARGV, when given: other tags' keys (Redis Cluster: in slots of their own,
-- so not KEYS), each read the same way where this node holds it; then the
-- reply is an array: KEYS[1]'s version, then each ARGV key's, or 0 for a key
-- this node does not hold (a script may touch undeclared keys of its node's
-- other slots; a key elsewhere, or in a slot migrating away, is an error
-- raised before anything is written).
local function version(key)
  local v = redis.call('GET', key)
  if v then return v end
  local t = redis.call('TIME')
  v = string.format('%d', tonumber(t[1]) * 1000000 + tonumber(t[2]))
  redis.call('SET', key, v, 'NX')
  return redis.call('GET', key)
end

local first = version(KEYS[1])
if #ARGV == 0 then return first end
local out = {first}
for i = 1, #ARGV do
  local ok, v = pcall(version, ARGV[i])
  out[i + 1] = ok and v or 0
end
return out
