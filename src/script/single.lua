-- Single-limit main: decides one limit with the `step` bound just above (one of the algorithm
-- functions). KEYS and ARGV as listed at the top of that algorithm's file.
local now = now_ms(ARGV[1])
local d, value, expire_at = step(redis.call('GET', KEYS[1]), int_arg(ARGV[2]), int_arg(ARGV[3]),
  int_arg(ARGV[4]), now, int_arg(ARGV[5]))
if value then
  store(KEYS[1], value, expire_at, now)
end
-- Reply: allowed, the time decided at, then the decision's six fields.
return { d[1], now, d[1], d[2], d[3], d[4], d[5], d[6] }
