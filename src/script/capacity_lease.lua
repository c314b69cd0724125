-- Capacity leases: the Lua twin of src/algorithm/capacity_lease.rs, for every deciding script.
--
-- KEYS     the item's lease key, {el:<ns>:<limit>:<id>}:lease, "<balance> <until_ms>": the
--          item's next key after its state key (read_item in prelude.lua)
-- options  spend 1          the item spends its lease when its step denies a request
--          spend 2          the lease alone decides the item (its state is never read)
--          credit <until>   the item's cost is credited to its lease, live until <until>
--
-- docs/design.md section 9, "In the stores". A lease (b, u) is live while now < u (over at u
-- itself); no lease is (0, 0) and an ended one reads as balance 0. A spending item is decided by
-- its step first; only when the step denies a request (no settle, no lease release) of cost
-- c > 0 is it admitted iff the lease is live and b >= c: then the state is not written, b
-- becomes b - c, and the decision is LEASED with remaining b - c, the step's reset_at and retry
-- 0; else the step's denial stands. A credit of a > 0 ending at e (at most MAX_LEASE_END) never
-- denies and leaves the state unread: a live lease becomes (min(b + a, MAX_LEASE), max(u, e)); an
-- ended one (min(a, MAX_LEASE), e) when e > now, else stays (nothing written). Its decision:
-- admitted, remaining the live balance after, reset_at the lease's end while live, else now.
-- Spending alone (spend 2): a request of c > 0 is admitted iff the lease is live and b >= c (then
-- b becomes b - c; decision LEASED, remaining b - c, reset_at u, retry 0), else denied OVER_LIMIT
-- with remaining the live balance, reset_at u while live else now, retry the policy's window;
-- anything else is a look at the lease. The state is never read or written.
-- A concurrency limit (code 6) holds no capacity lease: such an item is an error.
-- Balances stay below 2^52 (costs are clamped to 2^52, so b + a < 2^53: exact in doubles).

-- Kept in step with MAX_LEASE_BALANCE and MAX_LEASE_END_MS in src/algorithm/capacity_lease.rs
-- (a unit test checks it): 2^52 - 1.
local MAX_LEASE = 4503599627370495
local MAX_LEASE_END = 4503599627370495

-- The decision reason of an admission from a lease, beside ADMITTED, OVER_LIMIT, ...
local LEASED = 5

-- The lease at `key` as (balance, until): (0, 0) when absent. Its text is read strictly, as
-- parse_fields reads states: anything else was not written by these scripts.
local function lease_read(key)
  local raw = redis.call('GET', key)
  if not raw then
    return 0, 0
  end
  local b, u = string.match(raw, '^(%d+) (%d+)$')
  if not b then
    error('edgelimit: unreadable capacity lease')
  end
  b, u = tonumber(b), tonumber(u)
  if b > MAX_LEASE or u > MAX_LEASE_END then
    error('edgelimit: unreadable capacity lease')
  end
  return b, u
end

-- The lease as a credit's decision reports it.
local function lease_decision(cap, b, u, now)
  if now < u then
    return admitted(cap, b, u)
  end
  return admitted(cap, 0, now)
end

-- A credit item: the lease after the merge, its decision, and what to write (item.lease_value,
-- item.lease_until; nil when nothing changes).
local function lease_credit(item, now)
  local b, u = lease_read(item.lease_key)
  local a, e = item.cost, math.min(item.credit, MAX_LEASE_END)
  if a > 0 then
    if now < u then
      b, u = math.min(b + a, MAX_LEASE), math.max(u, e)
      item.lease_value, item.lease_until = fmt(b) .. ' ' .. fmt(u), u
    elseif e > now then
      b, u = math.min(a, MAX_LEASE), e
      item.lease_value, item.lease_until = fmt(b) .. ' ' .. fmt(u), u
    end
  end
  return lease_decision(item.cap, b, u, now)
end

-- An item the lease decides alone (spend 2): its decision, and what to write as lease_credit
-- leaves it.
local function lease_alone(item, now)
  local b, u = lease_read(item.lease_key)
  local live = now < u
  if item.cost <= 0 or item.settle or item.lease then
    return lease_decision(item.cap, b, u, now)
  end
  if live and b >= item.cost then
    b = b - item.cost
    item.lease_value, item.lease_until = fmt(b) .. ' ' .. fmt(u), u
    return { 1, item.cap, b, u, 0, LEASED }
  end
  if live then
    return over_limit(item.cap, b, u, item.window)
  end
  return over_limit(item.cap, 0, now, item.window)
end

-- Decides one item on its state (read into item.raw) and its lease: returns the decision, the
-- state's new value (nil: unchanged) and its expiry; a lease to write is left in item.lease_value
-- and item.lease_until. The twin of capacity_lease::apply. Its block aside: decide_item
-- (block.lua) calls this.
local function decide_unblocked(item, now)
  if (item.spend or item.credit) and item.code == 6 then
    error('edgelimit: a concurrency limit holds no capacity lease')
  end
  if item.credit then
    return lease_credit(item, now), nil, nil
  end
  if item.spend == 2 then
    return lease_alone(item, now), nil, nil
  end
  item.raw = redis.call('GET', item.key)
  local d, value, expire_at = run_item(item.step, item, now, item.cost)
  if d[1] == 0 and item.spend == 1 and item.cost > 0 and not item.settle and not item.lease then
    local b, u = lease_read(item.lease_key)
    if now < u and b >= item.cost then
      b = b - item.cost
      item.lease_value, item.lease_until = fmt(b) .. ' ' .. fmt(u), u
      d = { 1, d[2], b, d[4], 0, LEASED }
    end
  end
  return d, value, expire_at
end

-- What an item reports when its check is denied though it would have admitted alone, or when a
-- check denies in which its request id is remembered: a zero-cost look that changes nothing — at
-- its lease for a credit, at its state otherwise (whatever its lease holds).
local function look_item(item, now)
  if item.credit or item.spend == 2 then
    local b, u = lease_read(item.lease_key)
    return lease_decision(item.cap, b, u, now)
  end
  if item.raw == nil then
    item.raw = redis.call('GET', item.key)
  end
  return item.step(item.raw, item.limit, item.window, item.cap, now, 0, nil, item.delay)
end
