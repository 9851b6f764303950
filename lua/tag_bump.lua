-- tag_bump: invalidates a tag (xf_invalidate_tags): its version becomes
-- max(the server's time in us, version + 1), so it never equals a version an
-- entry recorded, even after its key was evicted or flushed and made again
-- (tag_read.lua). KEYS[1] the tag's key. Returns the new version, decimal.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local old = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if old + 1 > now then now = old + 1 end
local v = string.format('%d', now)
redis.call('SET', KEYS[1], v)
return v
