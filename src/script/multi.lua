-- Multi-limit main: decides N limits of mixed algorithms all or nothing, exactly as
-- src/store/batch.rs::decide. All keys must share one Cluster slot (the caller checks).
--
-- ARGV[1]  now_ms, or '' to take Redis TIME
-- then per item (see read_item in prelude.lua): its algorithm (1 fixed, 2 sliding-log,
-- 3 sliding-counter, 4 token-bucket, 5 gcra, 6 concurrency), limit, window (ms), capacity, cost,
-- the number of options and the options; KEYS: per item its state key, then its option keys.
--
-- Gated (docs/design.md section "Deny and allow lists"): ARGV[2] = 'gates' and the gate section
-- (read_gates in prelude.lua) come before the items, and the list keys first in KEYS. A deny
-- match refuses everything, nothing charged; items whose gate has an allow match are left out
-- of the check (decided as allowlisted); the rest are decided as below.
--
-- Reply: allowed, the time decided at, then six fields per item (see single.lua); gated, then
-- three values per gate (see gated_reply).
--
-- Rule: every item is decided on its stored state (and capacity lease, capacity_lease.lua); the
-- states and leases are written only if every item admits. When one denies, nothing is written,
-- and the items that would have admitted alone report a zero-cost look at their unchanged state
-- (a credit at its unchanged lease); an item its own step denied starts its block (block.lua),
-- and a blocked item denies the check. An admitted check is remembered under each
-- item's request key. A repeat whose every item is remembered answers the remembered decisions
-- at the first decision's time and charges nothing; when only some are, those are left out of
-- the deciding (charged nothing, no block) and the others are decided as a new check, which
-- then admits or denies the whole: admitted, a remembered item answers its remembered decision;
-- denied, a look, as every item that would have admitted alone.
local steps = { fixed_window, sliding_log, sliding_counter, token_bucket, gcra, concurrency }
local now = now_ms(ARGV[1])
local items = {}
local a, k = 2, 1
local gates
if ARGV[2] == 'gates' then
  gates, a, k = read_gates(3)
end
while a <= #ARGV do
  local item
  item, a, k = read_item(a, k, true)
  item.step = steps[item.code]
  if not item.step then
    error('edgelimit: unknown algorithm code')
  end
  items[#items + 1] = item
end
-- Each item decides (and looks) with its effective policy: its assignment read first.
for i = 1, #items do
  control(items[i], now)
end
if k ~= #KEYS + 1 then
  error('edgelimit: expected one state key per item and one key per keyed option')
end
local all, listed = items, {}
if gates then
  local denied
  listed, denied = decide_gates(gates, now)
  if denied then
    for i = 1, #all do
      all[i].listed_d = { 0, all[i].cap, 0, now, RETRY_NEVER, DENYLISTED }
    end
    return gated_reply(all, { 0, now }, listed)
  end
  items = {}
  for i = 1, #all do
    local found = all[i].gate and listed[all[i].gate]
    if found and found[1] == LISTED_ALLOWED then
      all[i].listed_d = { 1, all[i].cap, all[i].cap, now, 0, ALLOWLISTED }
    else
      items[#items + 1] = all[i]
    end
  end
end
local function finish(reply)
  if gates then
    return gated_reply(all, reply, listed)
  end
  return reply
end
local n = #items
local decided_at
local remembered = 0
for i = 1, n do
  items[i].old = recall(items[i], now)
  if items[i].old then
    remembered = remembered + 1
    if not decided_at then
      decided_at = items[i].old[2]
    end
  end
end
local function remembered_decision(item)
  local old = item.old
  return { old[3], old[4], old[5], old[6], old[7], old[8] }
end
if n > 0 and remembered == n then
  local reply = { 1, decided_at }
  for i = 1, n do
    local d = remembered_decision(items[i])
    for j = 1, 6 do
      reply[#reply + 1] = d[j]
    end
  end
  return finish(reply)
end
local allowed = 1
for i = 1, n do
  local item = items[i]
  if not item.old then
    item.d, item.value, item.expire_at = decide_item(item, now)
    if item.d[1] == 0 then
      allowed = 0
    end
  end
end
local reply = { allowed, now }
for i = 1, n do
  local item = items[i]
  if item.old then
    if allowed == 1 then
      item.d = remembered_decision(item)
    else
      item.d = look_item(item, now)
    end
  elseif allowed == 1 then
    if item.value then
      store(item.key, item.value, item.expire_at, now)
    end
    if item.lease_value then
      store(item.lease_key, item.lease_value, item.lease_until, now)
    end
    if item.rq_key then
      remember(item, now, item.d)
    end
  elseif item.d[1] == 1 then
    item.d = look_item(item, now)
  else
    -- Denied on its own step, it starts its block even though nothing else is written.
    store_block(item, now)
  end
  for j = 1, 6 do
    reply[#reply + 1] = item.d[j]
  end
end
return finish(reply)
