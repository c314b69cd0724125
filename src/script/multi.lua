-- Multi-limit main: decides N limits of mixed algorithms all or nothing, exactly as
-- src/store/batch.rs::decide. All keys must share one Cluster slot (the caller checks).
--
-- KEYS[i]          the state key of item i
-- ARGV[1]          now_ms, or '' to take Redis TIME
-- ARGV[2 + 5(i-1)] item i's algorithm: 1 fixed, 2 sliding-log, 3 sliding-counter,
--                  4 token-bucket, 5 gcra
-- ARGV[3 + 5(i-1)] limit      ARGV[4 + 5(i-1)] window (ms)      ARGV[5 + 5(i-1)] capacity
-- ARGV[6 + 5(i-1)] cost
--
-- Reply: allowed, the time decided at, then six fields per item (see single.lua).
--
-- Rule: every item is decided on its stored state; the states are written only if every item
-- admits. When one denies, nothing is written, and the items that would have admitted alone
-- report a zero-cost look at their unchanged state.
local steps = { fixed_window, sliding_log, sliding_counter, token_bucket, gcra }
local now = now_ms(ARGV[1])
local n = #KEYS
if #ARGV ~= 1 + 5 * n then
  error('edgelimit: expected 5 arguments per key')
end
local items, allowed = {}, 1
for i = 1, n do
  local base = 1 + 5 * (i - 1)
  local item = {
    step = steps[int_arg(ARGV[base + 1])],
    limit = int_arg(ARGV[base + 2]),
    window = int_arg(ARGV[base + 3]),
    cap = int_arg(ARGV[base + 4]),
    cost = int_arg(ARGV[base + 5]),
    raw = redis.call('GET', KEYS[i]),
  }
  if not item.step then
    error('edgelimit: unknown algorithm code')
  end
  item.d, item.value, item.expire_at = item.step(item.raw, item.limit, item.window, item.cap,
    now, item.cost)
  if item.d[1] == 0 then
    allowed = 0
  end
  items[i] = item
end
local reply = { allowed, now }
for i = 1, n do
  local item = items[i]
  if allowed == 1 then
    if item.value then
      store(KEYS[i], item.value, item.expire_at, now)
    end
  elseif item.d[1] == 1 then
    item.d = item.step(item.raw, item.limit, item.window, item.cap, now, 0)
  end
  for j = 1, 6 do
    reply[#reply + 1] = item.d[j]
  end
end
return reply
