-- edgelimit prelude: shared by every limiter script (see src/script/mod.rs for how the scripts
-- are assembled). Redis runs Lua 5.1, whose numbers are doubles: exact for integers below 2^53.
-- Every value here stays below that because the Rust side bounds it: policies keep limit x window
-- and burst x window <= 2^50 (src/policy.rs, MAX_SCALED), times are < 2^52 ms, costs are clamped
-- to +-2^52 (a larger cost decides exactly alike). Divisions go through `idiv`, never `/` alone,
-- and numbers are written with '%d', never tostring (which keeps only 14 significant digits).

-- Kept in step with GC_GRACE_MS in src/store/memory.rs (a unit test checks it).
local GC_GRACE_MS = 60000

-- Retry time of a request that can never be admitted (RETRY_NEVER, u64::MAX, is no Lua number).
local RETRY_NEVER = -1

-- Decision reasons, as the Rust parser reads them.
local ADMITTED, OVER_LIMIT, COST_EXCEEDS_CAPACITY = 0, 1, 2

-- floor(a / b), exactly, for 0 <= a < 2^53 and 0 < b: the double quotient is correctly rounded,
-- so its floor is off by at most one; the remainder tells which way.
local function idiv(a, b)
  local q = math.floor(a / b)
  local r = a - q * b
  if r < 0 then
    q = q - 1
  elseif r >= b then
    q = q + 1
  end
  return q
end

-- a mod b, exactly (same domain as idiv).
local function imod(a, b)
  return a - idiv(a, b) * b
end

-- ceil(a / b), exactly (same domain as idiv).
local function ceil_div(a, b)
  local q = idiv(a, b)
  if q * b < a then
    q = q + 1
  end
  return q
end

-- a - b, or 0 when b > a.
local function sat_sub(a, b)
  if a > b then
    return a - b
  end
  return 0
end

-- An integer as decimal text, all digits.
local function fmt(n)
  return string.format('%d', n)
end

-- A decision as the reply carries it: allowed, limit, remaining, reset_at_ms, retry_after_ms,
-- reason.
local function admitted(cap, remaining, reset_at)
  return { 1, cap, remaining, reset_at, 0, ADMITTED }
end

local function over_limit(cap, remaining, reset_at, retry_after)
  return { 0, cap, remaining, reset_at, retry_after, OVER_LIMIT }
end

local function too_costly(cap, remaining, reset_at)
  return { 0, cap, remaining, reset_at, RETRY_NEVER, COST_EXCEEDS_CAPACITY }
end

-- The state fields stored at a key: decimal integers separated by single spaces. Anything else
-- was not written by these scripts: fail loudly rather than decide on garbage.
local function parse_fields(raw, count)
  local fields = {}
  for word in string.gmatch(raw, '[^ ]+') do
    if not string.match(word, '^%d+$') then
      error('edgelimit: unreadable limiter state')
    end
    fields[#fields + 1] = tonumber(word)
  end
  if count and #fields ~= count then
    error('edgelimit: unreadable limiter state')
  end
  return fields
end

-- A state written as `seen` then (time, count) pairs, as the sliding log and concurrency keep it.
-- Returns seen, the number of pairs, the sum of their counts, their times and their counts.
local function parse_pairs(raw)
  local seen, n, total = 0, 0, 0
  local times, counts = {}, {}
  if raw then
    local f = parse_fields(raw, nil)
    if #f % 2 ~= 1 then
      error('edgelimit: unreadable limiter state')
    end
    seen = f[1]
    for i = 2, #f, 2 do
      n = n + 1
      times[n], counts[n] = f[i], f[i + 1]
      total = total + f[i + 1]
    end
  end
  return seen, n, total, times, counts
end

-- "Now" in epoch ms: the caller's time, or Redis TIME when the argument is empty.
local function now_ms(arg)
  if arg == '' then
    local time = redis.call('TIME')
    return tonumber(time[1]) * 1000 + idiv(tonumber(time[2]), 1000)
  end
  if not string.match(arg, '^%d+$') then
    error('edgelimit: bad time argument')
  end
  return tonumber(arg)
end

-- A decimal integer argument (optionally negative).
local function int_arg(arg)
  if type(arg) ~= 'string' or not string.match(arg, '^%-?%d+$') then
    error('edgelimit: bad integer argument')
  end
  return tonumber(arg)
end

-- Writes a state with a TTL that only collects garbage: a duration (never an absolute PEXPIREAT,
-- so a replay on a virtual clock in the past still works), a grace period past the moment the
-- state stops mattering.
local function store(key, value, expire_at, now)
  redis.call('SET', key, value, 'PX', fmt(expire_at - now + GC_GRACE_MS))
end

-- One item's arguments from ARGV[a] and its keys from KEYS[k] (docs/design.md section 2, "the Lua
-- twin"): [code,] limit, window, capacity, cost, then the number of options and that many
-- (name, value) pairs. The state key comes first; each option that needs a key takes the item's
-- next one. A single-limit call may stop after the cost (no options). Returns the item and where
-- the next item's arguments and keys begin.
--   settle 1        a positive cost is charged even if it does not fit, down to an empty quota
--   lease <end_ms>  (concurrency) release up to `cost` leases ending at end_ms
--   rq <ms>         remember an admitted decision under the next key for <ms> (a request id)
--   ctl <tiers>     decide with the effective policy (see `control`): the assignment is read
--                   from the next key; <tiers> is the limit's tier table, "name=L,W,cap;..."
local function read_item(a, k, with_code)
  local item = {}
  if with_code then
    item.code = int_arg(ARGV[a])
    a = a + 1
  end
  item.limit, item.window = int_arg(ARGV[a]), int_arg(ARGV[a + 1])
  item.cap, item.cost = int_arg(ARGV[a + 2]), int_arg(ARGV[a + 3])
  a = a + 4
  item.key = KEYS[k]
  k = k + 1
  local nopts = 0
  if ARGV[a] ~= nil then
    nopts = int_arg(ARGV[a])
    a = a + 1
  end
  for _ = 1, nopts do
    local name, value = ARGV[a], ARGV[a + 1]
    a = a + 2
    if name == 'settle' then
      item.settle = true
    elseif name == 'lease' then
      item.lease = int_arg(value)
    elseif name == 'rq' then
      item.remember = int_arg(value)
      item.rq_key = KEYS[k]
      k = k + 1
    elseif name == 'ctl' then
      item.tiers = value or ''
      item.ctl_key = KEYS[k]
      k = k + 1
    else
      error('edgelimit: unknown item option')
    end
  end
  if not item.key or (item.remember and not item.rq_key) or (item.tiers and not item.ctl_key) then
    error('edgelimit: missing key')
  end
  return item, a, k
end

-- The item's effective policy (docs/design.md section 2, "Policy changes"), the twin of
-- control::effective_policy in Rust. The ctl key holds one line per kind of assignment:
-- "<until> t <tier>" and/or "<until> o <code> <limit> <window> <capacity>" (until 0: never
-- lapses; a line lapses once now >= until). An unlapsed override of the item's algorithm (code)
-- decides; else an unlapsed tier named in item.tiers ("name=L,W,cap;..."); else the limit's own
-- policy, as sent. An override of another algorithm and an unknown tier are ignored.
local function control(item, now)
  if not item.ctl_key then
    return
  end
  local raw = redis.call('GET', item.ctl_key)
  if not raw then
    return
  end
  local over, tier
  for line in string.gmatch(raw, '[^\n]+') do
    local until_ms, kind, rest = string.match(line, '^(%d+) ([to]) (.+)$')
    if not until_ms then
      error('edgelimit: unreadable assignment')
    end
    until_ms = tonumber(until_ms)
    local live = until_ms == 0 or now < until_ms
    if kind == 'o' then
      local code, l, w, cap = string.match(rest, '^(%d+) (%d+) (%d+) (%d+)$')
      if not code then
        error('edgelimit: unreadable assignment')
      end
      if live and tonumber(code) == item.code then
        over = { l, w, cap }
      end
    else
      if #rest > 64 or not string.match(rest, '^[%w%-_%.]+$') then
        error('edgelimit: unreadable assignment')
      end
      local tiers = ';' .. item.tiers
      local at = string.find(tiers, ';' .. rest .. '=', 1, true)
      if live and at then
        local l, w, cap = string.match(string.sub(tiers, at + #rest + 2), '^(%d+),(%d+),(%d+)')
        if not l then
          error('edgelimit: bad tier table')
        end
        tier = { l, w, cap }
      end
    end
  end
  local p = over or tier
  if p then
    local l, w, cap = tonumber(p[1]), tonumber(p[2]), tonumber(p[3])
    if l < 1 or w < 1 or cap < 1 then
      error('edgelimit: unreadable assignment')
    end
    item.limit, item.window, item.cap = l, w, cap
  end
end

-- Decides an item with its algorithm's `step` on its stored state `item.raw`. A settlement's
-- positive cost is a request for what is left of the quota, at most the cost (a look when
-- nothing is left), exactly as State::apply_charge.
local function run_item(step, item, now, cost)
  if item.settle and cost > 0 then
    local d = step(item.raw, item.limit, item.window, item.cap, now, 0)
    cost = math.min(cost, d[3])
  end
  return step(item.raw, item.limit, item.window, item.cap, now, cost, item.lease)
end

-- The decision remembered under the item's request key if it is still live at `now`:
-- { until, decided_at, six fields }, or nil.
local function recall(item, now)
  if not item.rq_key then
    return nil
  end
  local raw = redis.call('GET', item.rq_key)
  if not raw then
    return nil
  end
  local f = parse_fields(raw, 8)
  if now >= f[1] then
    return nil
  end
  return f
end

-- Remembers an admitted decision `d` under the item's request key until now + item.remember.
local function remember(item, now, d)
  local parts = { fmt(now + item.remember), fmt(now) }
  for j = 1, 6 do
    parts[j + 2] = fmt(d[j])
  end
  redis.call('SET', item.rq_key, table.concat(parts, ' '), 'PX',
    fmt(item.remember + GC_GRACE_MS))
end
