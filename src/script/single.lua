-- Single-limit main: decides one limit with the `step` bound just above (one of the algorithm
-- functions; `code` is its algorithm code, as multi.lua numbers them). KEYS and ARGV as listed at the top of that algorithm's file, then the options of
-- `read_item` (prelude.lua).
local now = now_ms(ARGV[1])
local item = read_item(2, 1, false)
item.code = code
control(item, now)
-- Reply: allowed, the time decided at, then the decision's six fields.
local old = recall(item, now)
if old then
  -- A repeat of an admitted request: its first decision, charged once.
  return { 1, old[2], old[3], old[4], old[5], old[6], old[7], old[8] }
end
item.raw = redis.call('GET', item.key)
local d, value, expire_at = run_item(step, item, now, item.cost)
if value then
  store(item.key, value, expire_at, now)
end
if item.rq_key and d[1] == 1 then
  remember(item, now, d)
end
return { d[1], now, d[1], d[2], d[3], d[4], d[5], d[6] }
