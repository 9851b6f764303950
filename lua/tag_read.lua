-- tag_read: the current version of a tag (policy.tags), read before a call
-- loads or writes. KEYS[1] the tag's key. A tag never seen (or whose key
-- was evicted or flushed) gets a version first: the server's time in us,
-- above every version it could have had, so that an entry that recorded an
-- older one is never current again. Returns the version, decimal digits.
local v = redis.call('GET', KEYS[1])
if v then return v end
local t = redis.call('TIME')
v = string.format('%d', tonumber(t[1]) * 1000000 + tonumber(t[2]))
redis.call('SET', KEYS[1], v, 'NX')
return redis.call('GET', KEYS[1])
