-- Single-limit main: decides one limit with the `step` bound just above (one of the algorithm
-- functions; `code` is its algorithm code, as multi.lua numbers them). KEYS and ARGV as listed at the top of that algorithm's file, then the options of
-- `read_item` (prelude.lua).
local now = now_ms(ARGV[1])
local item = read_item(2, 1, false)
item.code, item.step = code, step
control(item, now)
-- Reply: allowed, the time decided at, then the decision's six fields.
local old = recall(item, now)
if old then
  -- A repeat of an admitted request: its first decision, charged once.
  return { 1, old[2], old[3], old[4], old[5], old[6], old[7], old[8] }
end
-- The step, then the capacity lease (capacity_lease.lua): a denial writes nothing.
local d, value, expire_at = decide_item(item, now)
if value then
  store(item.key, value, expire_at, now)
end
if item.lease_value then
  store(item.lease_key, item.lease_value, item.lease_until, now)
end
-- A denial on the item's own step starts its block (block.lua).
store_block(item, now)
if item.rq_key and d[1] == 1 then
  remember(item, now, d)
end
return { d[1], now, d[1], d[2], d[3], d[4], d[5], d[6] }
