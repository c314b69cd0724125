-- Peek main (docs/design.md section "Peek and reset"): an identifier's standing on a limit, a
-- zero-cost look that writes nothing, not even pruning.
--
-- KEYS[1] the state key; ARGV[1] now_ms or '' for Redis TIME, ARGV[2] the algorithm code (as in
-- multi.lua), then limit, window (ms), capacity.
-- Reply: as single.lua's (allowed, the time decided at, the decision's six fields).
local steps = { fixed_window, sliding_log, sliding_counter, token_bucket, gcra, concurrency }
local now = now_ms(ARGV[1])
local step = steps[int_arg(ARGV[2])]
if not step then
  error('edgelimit: unknown algorithm code')
end
local limit, window, cap = int_arg(ARGV[3]), int_arg(ARGV[4]), int_arg(ARGV[5])
local d = step(redis.call('GET', KEYS[1]), limit, window, cap, now, 0)
return { d[1], now, d[1], d[2], d[3], d[4], d[5], d[6] }
