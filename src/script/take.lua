-- Take main: the Lua twin of src/global/take.rs ("take up to x", docs/design.md section 9):
-- takes up to each take's want from its source, in order, each decided on its own (a take never
-- fails another), all in one script call — a region's ask of the home's pool (with the demand
-- count beside it) or of one lender (its share and its lease).
--
-- ARGV[1]  now_ms, or '' to take Redis TIME
-- then per take: need, then the item as multi.lua reads it (read_item in prelude.lua): its
-- algorithm, limit, window (ms), capacity, cost (the want), the number of options and the
-- options; KEYS: per take its state key, then its option keys. A take is a plain request on one
-- source, its state or (spend 2) its lease alone: no settle, release, credit, lease spent after
-- the state, request id, block, delay or gate, and no concurrency limit.
--
-- Rule: k is the largest cost <= want that the item's step (and its lease, capacity_lease.lua)
-- admits — want itself when it is admitted, else a bisection of [0, want) on trial decisions
-- that write nothing; 0 is a look. The request of k is then decided and written. The decision
-- replied is that request's when k >= need, else the decision a request of need - k would get
-- on what the take left (written nothing).
--
-- Reply: the time decided at, then per take: k and the decision's six fields (see single.lua).
local steps = { fixed_window, sliding_log, sliding_counter, token_bucket, gcra }
local now = now_ms(ARGV[1])
local takes = {}
local a, k = 2, 1
while a <= #ARGV do
  local need = int_arg(ARGV[a])
  local item
  item, a, k = read_item(a + 1, k, true)
  item.step = steps[item.code]
  if not item.step then
    error('edgelimit: a take names no rate algorithm')
  end
  if item.settle or item.lease or item.credit or item.spend == 1 or item.remember
      or item.block_ms or item.delay or item.gate or need < 0 then
    error('edgelimit: a take is a plain request')
  end
  item.need, item.want = need, math.max(item.cost, 0)
  takes[#takes + 1] = item
end
if k ~= #KEYS + 1 then
  error('edgelimit: expected one state key per take and one key per keyed option')
end
for i = 1, #takes do
  control(takes[i], now)
end

-- The item's decision for a request of `cost` on what is stored now, writing nothing: its
-- state's new value and expiry are returned, its lease's left in item.lease_value.
local function trial(item, cost)
  item.cost, item.lease_value, item.lease_until = cost, nil, nil
  return decide_unblocked(item, now)
end

local reply = { now }
for i = 1, #takes do
  local item = takes[i]
  local want = item.want
  local taken = want
  if trial(item, want)[1] ~= 1 then
    -- Admitted at low, denied at high.
    local low, high = 0, want
    while high - low > 1 do
      local mid = low + idiv(high - low, 2)
      if trial(item, mid)[1] == 1 then
        low = mid
      else
        high = mid
      end
    end
    taken = low
  end
  local d, value, expire_at = trial(item, taken)
  if value then
    store(item.key, value, expire_at, now)
  end
  if item.lease_value then
    store(item.lease_key, item.lease_value, item.lease_until, now)
  end
  if taken < item.need then
    d = trial(item, item.need - taken)
  end
  reply[#reply + 1] = taken
  for j = 1, 6 do
    reply[#reply + 1] = d[j]
  end
end
return reply
