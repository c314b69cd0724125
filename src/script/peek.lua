-- Peek main (docs/design.md section "Peek and reset"): an identifier's standing on a limit, a
-- zero-cost look that writes nothing, not even pruning.
--
-- KEYS[1] the state key; ARGV[1] now_ms or '' for Redis TIME, ARGV[2] the algorithm code (as in
-- multi.lua), then limit, window (ms), capacity.
-- Optionally KEYS[2] the identifier's control key and ARGV[6] the limit's tier table (as the
-- `ctl` option of read_item takes it): the look is then made under the effective policy, read
-- by `control` exactly as the deciding scripts read it (same hash tag, same round trip).
-- Reply: as single.lua's (allowed, the time decided at, the decision's six fields).
local steps = { fixed_window, sliding_log, sliding_counter, token_bucket, gcra, concurrency }
local now = now_ms(ARGV[1])
local code = int_arg(ARGV[2])
local step = steps[code]
if not step then
  error('edgelimit: unknown algorithm code')
end
local item = { code = code, key = KEYS[1] }
item.limit, item.window, item.cap = int_arg(ARGV[3]), int_arg(ARGV[4]), int_arg(ARGV[5])
if KEYS[2] then
  if ARGV[6] == nil then
    error('edgelimit: missing tier table')
  end
  item.ctl_key, item.tiers = KEYS[2], ARGV[6]
  control(item, now)
end
-- ARGV[7], when given: a delaying GCRA limit's longest wait (gcra.lua), so the look reads its
-- queue as the deciding scripts do.
local delay
if ARGV[7] ~= nil then
  delay = int_arg(ARGV[7])
end
local d = step(redis.call('GET', item.key), item.limit, item.window, item.cap, now, 0, nil, delay)
return { d[1], now, d[1], d[2], d[3], d[4], d[5], d[6] }
