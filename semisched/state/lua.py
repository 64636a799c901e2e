"""The Lua scripts of `semisched.state.redis` (its module docstring gives their rules).

Each script starts with `PRELUDE`: effects replication on Redis 6.2 and
the server's clock in µs. Values only: nothing here talks to Redis.
"""

from __future__ import annotations

__all__ = [
    "HEARTBEAT",
    "PAUSE",
    "PRELUDE",
    "RECORD",
    "RESERVE",
    "SETTLE",
    "SOURCES",
    "USAGE",
    "WORKERS",
]

PRELUDE = """
if redis.replicate_commands then redis.replicate_commands() end
local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2]), t[1] .. '.' .. t[2]
end
local function chunks(list, f)
  for i = 1, #list, 1000 do f(unpack(list, i, math.min(i + 999, #list))) end
end
local function arm(ms, first, ...)
  ms = math.max(ms, redis.call('PTTL', first))
  redis.call('PEXPIRE', first, ms)
  for _, k in ipairs({...}) do redis.call('PEXPIRE', k, ms) end
end
local function purge(charges, tokens, leases, now, window)
  local edge = now - window
  local old = redis.call('ZRANGEBYSCORE', charges, '-inf', edge)
  if #old > 0 then
    local freed = 0
    chunks(old, function(...)
      for _, v in ipairs(redis.call('HMGET', tokens, ...)) do freed = freed + (tonumber(v) or 0) end
      redis.call('HDEL', tokens, ...)
    end)
    redis.call('ZREMRANGEBYSCORE', charges, '-inf', edge)
    redis.call('HINCRBY', tokens, 'total', -freed)
  end
  redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
end
"""

# KEYS: per scope charges, tokens, leases, pause, then the workers. ARGV: member,
# milli-tokens, lease µs, the worker, then per scope rpm, tpm (milli-tokens),
# max_concurrency (0: unlimited), window µs. Returns {1, report}, {0, wait µs, scope
# index, reason, report}, or {-1} when the worker is not registered; the report: the
# workers registered now, then per scope its charges and milli-tokens.
RESERVE = """
local member, units, lease = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now, stamp = clock()
local mine = tonumber(redis.call('ZSCORE', KEYS[#KEYS], ARGV[4]))
if not mine or mine <= now then return {-1} end
local worst, where, why = 0, 0, ''
local function tpm_wait(charges, tokens, need, count)
  local freed = 0
  for start = 0, count - 1, 256 do
    local page = redis.call('ZRANGE', charges, start, start + 255, 'WITHSCORES')
    local names = {}
    for j = 1, #page, 2 do names[#names + 1] = page[j] end
    local vals = redis.call('HMGET', tokens, unpack(names))
    for j = 1, #names do
      freed = freed + (tonumber(vals[j]) or 0)
      if freed >= need then return tonumber(page[2 * j]) end
    end
  end
  return now
end
local scopes = (#KEYS - 1) / 4
local function report(out)
  out[#out + 1] = redis.call('ZCOUNT', KEYS[#KEYS], '(' .. now, '+inf')
  for i = 1, scopes do
    out[#out + 1] = redis.call('ZCARD', KEYS[4*i-3])
    out[#out + 1] = tonumber(redis.call('HGET', KEYS[4*i-2], 'total')) or 0
  end
  return out
end
for i = 1, scopes do
  local charges, tokens, leases, pause = KEYS[4*i-3], KEYS[4*i-2], KEYS[4*i-1], KEYS[4*i]
  local rpm, tpm = tonumber(ARGV[4*i+1]), tonumber(ARGV[4*i+2])
  local cap, window = tonumber(ARGV[4*i+3]), tonumber(ARGV[4*i+4])
  local function refuse(wait, reason)
    if wait > worst then worst, where, why = wait, i, reason end
  end
  purge(charges, tokens, leases, now, window)
  local stop = tonumber(redis.call('GET', pause))
  if stop and stop > now then refuse(stop - now, 'paused') end
  local count = redis.call('ZCARD', charges)
  if rpm > 0 and count >= rpm then
    local e = redis.call('ZRANGE', charges, count - rpm, count - rpm, 'WITHSCORES')
    refuse(tonumber(e[2]) + window - now, 'rpm')
  end
  if tpm > 0 and units > tpm then
    refuse(2 ^ 52, 'never')
  elseif tpm > 0 then
    local total = tonumber(redis.call('HGET', tokens, 'total')) or 0
    if total + units > tpm then
      refuse(tpm_wait(charges, tokens, total + units - tpm, count) + window - now, 'tpm')
    end
  end
  if cap > 0 and not redis.call('ZSCORE', leases, member) then
    if redis.call('ZCARD', leases) >= cap then
      local e = redis.call('ZRANGE', leases, 0, 0, 'WITHSCORES')
      refuse(math.min(tonumber(e[2]) - now, 50000), 'concurrency')
    end
  end
end
if why ~= '' then return report({0, worst, where, why}) end
for i = 1, scopes do
  local charges, tokens, leases = KEYS[4*i-3], KEYS[4*i-2], KEYS[4*i-1]
  if redis.call('HSETNX', tokens, member, units) == 0 then
    local renamed = member .. '#' .. stamp
    while redis.call('HEXISTS', tokens, renamed) == 1 do renamed = renamed .. '+' end
    redis.call('ZADD', charges, redis.call('ZSCORE', charges, member), renamed)
    redis.call('HSET', tokens, renamed, redis.call('HGET', tokens, member))
    redis.call('HSET', tokens, member, units)
  end
  redis.call('ZADD', charges, now, member)
  redis.call('HINCRBY', tokens, 'total', units)
  redis.call('ZADD', leases, now + lease, member)
  local ms = math.ceil((tonumber(ARGV[4*i+4]) + lease) / 1000)
  arm(ms, tokens, charges)
  arm(ms, leases)
end
return report({1})
"""

# KEYS: one scope's charges, tokens, leases. ARGV: window µs, lease µs, then per send
# member, age µs, milli-tokens (a member already charged is left as it is).
RECORD = """
local window, lease = tonumber(ARGV[1]), tonumber(ARGV[2])
local charges, tokens, leases = KEYS[1], KEYS[2], KEYS[3]
local now = clock()
purge(charges, tokens, leases, now, window)
local recorded = 0
for i = 3, #ARGV, 3 do
  local member, age, units = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  if age < window and redis.call('HSETNX', tokens, member, units) == 1 then
    redis.call('ZADD', charges, now - age, member)
    redis.call('HINCRBY', tokens, 'total', units)
    recorded = recorded + 1
  end
end
if recorded > 0 then arm(math.ceil((window + lease) / 1000), tokens, charges) end
return recorded
"""

# KEYS: per scope charges, tokens, leases. ARGV: member, milli-tokens, then per scope window µs.
SETTLE = """
local member, units = ARGV[1], tonumber(ARGV[2])
local now = clock()
for i = 1, #KEYS / 3 do
  local charges, tokens, leases = KEYS[3*i-2], KEYS[3*i-1], KEYS[3*i]
  purge(charges, tokens, leases, now, tonumber(ARGV[i + 2]))
  local before = tonumber(redis.call('HGET', tokens, member))
  if before then
    redis.call('HSET', tokens, member, units)
    redis.call('HINCRBY', tokens, 'total', units - before)
  end
end
"""

# KEYS: workers, then one lease set per lease held. ARGV: worker, TTL µs, then the members.
# Returns 1 when the worker was registered (0: it is now, and was not).
HEARTBEAT = """
local ttl = tonumber(ARGV[2])
local now = clock()
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local known = redis.call('ZADD', KEYS[1], now + ttl, ARGV[1]) == 0 and 1 or 0
arm(math.ceil(ttl / 1000), KEYS[1])
local renewed = 0
for i = 2, #KEYS do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
  renewed = renewed + redis.call('ZADD', KEYS[i], 'XX', 'CH', now + ttl, ARGV[i + 1])
  arm(math.ceil(ttl / 1000), KEYS[i])
end
return known
"""

# KEYS: workers.
WORKERS = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', (clock()))
return redis.call('ZCARD', KEYS[1])
"""

# KEYS: the pause key. ARGV: its length, µs.
PAUSE = """
local length = tonumber(ARGV[1])
local stop = (clock()) + length
local current = tonumber(redis.call('GET', KEYS[1]))
if not current or current < stop then
  redis.call('SET', KEYS[1], stop, 'PX', math.ceil(length / 1000))
end
"""

# KEYS: the usage hash (tenant -> work tokens at its time), the times hash (tenant -> server
# µs). ARGV: half-life µs, key TTL ms, floor, then tenant, work tokens pairs to add. Returns
# {tenant, decayed value} pairs (strings: a Lua number would come back as an integer).
USAGE = """
local values, times = KEYS[1], KEYS[2]
local half, ttl, floor = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local now = clock()
local function decayed(v, t)
  return (tonumber(v) or 0) * 2 ^ (-math.max(0, now - (tonumber(t) or now)) / half)
end
for i = 4, #ARGV, 2 do
  local name = ARGV[i]
  local v = decayed(redis.call('HGET', values, name), redis.call('HGET', times, name))
  redis.call('HSET', values, name, string.format('%.17g', v + tonumber(ARGV[i + 1])))
  redis.call('HSET', times, name, now)
end
if #ARGV > 3 then arm(ttl, values, times) end
local all = redis.call('HGETALL', values)
local out, gone = {}, {}
for j = 1, #all, 2 do
  local name = all[j]
  local v = decayed(all[j + 1], redis.call('HGET', times, name))
  if v < floor then
    gone[#gone + 1] = name
  else
    out[#out + 1] = name
    out[#out + 1] = string.format('%.17g', v)
  end
end
if #gone > 0 then
  chunks(gone, function(...) redis.call('HDEL', values, ...) redis.call('HDEL', times, ...) end)
end
return out
"""

SOURCES = {
    name: PRELUDE + body
    for name, body in (
        ("reserve", RESERVE),
        ("record", RECORD),
        ("settle", SETTLE),
        ("heartbeat", HEARTBEAT),
        ("workers", WORKERS),
        ("pause", PAUSE),
        ("usage", USAGE),
    )
}
