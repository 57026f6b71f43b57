-- A Redis-side token bucket that answers like sluice's
-- RL.ACQUIRE key RATE rate BURST burst (PER second, COST 1), so that
-- bench/compare.sh can set sluice against the usual Lua limiter.
--
-- KEYS[1] is the bucket; ARGV[1] the rate in tokens per second; ARGV[2]
-- the burst capacity. The bucket refills continuously from the server's
-- clock (TIME); its state is a hash of tokens (fractional) and ts (the
-- microsecond it was last charged). As in sluice, a denied call changes
-- nothing, and a bucket expires when it would be full again, so idle keys
-- cost no memory.
--
-- Reply: {allowed (1/0), remaining, limit, retry_after_ms, reset_after_ms,
-- limited_by}, the six elements of RL.ACQUIRE.
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1]) or burst
local ts = tonumber(state[2]) or now
if now < ts then
  now = ts -- the clock stepped back: refill nothing rather than go negative
end
tokens = math.min(burst, tokens + (now - ts) * rate / 1000000)

if tokens < 1 then
  local retry = math.ceil((1 - tokens) * 1000 / rate)
  local reset = math.ceil((burst - tokens) * 1000 / rate)
  return {0, 0, burst, retry, reset, KEYS[1]}
end

tokens = tokens - 1
local reset = math.ceil((burst - tokens) * 1000 / rate)
redis.call('HSET', KEYS[1], 'tokens', tokens, 'ts', now)
redis.call('PEXPIRE', KEYS[1], math.max(reset, 1))
return {1, math.floor(tokens), burst, 0, reset, KEYS[1]}
