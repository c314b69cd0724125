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
-- An admission after a wait (docs/design.md section 2, "Delays"), after LEASED (5), BLOCKED (6).
local DELAYED = 7

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

local function delayed(cap, remaining, reset_at, wait)
  return { 1, cap, remaining, reset_at, wait, DELAYED }
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
--   spend 1         (rate algorithms) a request the step denies may be admitted from the capacity
--                   lease at the next key (capacity_lease.lua, docs/design.md section 9)
--   spend 2         (rate algorithms) the capacity lease at the next key decides alone; the state
--                   is neither read nor written
--   credit <until>  (rate algorithms) the cost is credited to the capacity lease at the next key,
--                   live until <until>; the state is not read
--   rq <ms>         remember an admitted decision under the next key for <ms> (a request id)
--   ctl <tiers>     decide with the effective policy (see `control`): the assignment is read
--                   from the next key; <tiers> is the limit's tier table, "name=L,W,cap;..."
--   block <ms>      a request of positive cost on a limit blocking for <ms> after a denial: its
--                   block's end is read from (and a new one written to) the next key (block.lua)
--   delay <ms>      (gcra) the limit delays a request rather than deny it while the wait is at
--                   most <ms> (gcra.lua); sent with every charge of such a limit
--   gate <g>        the item is behind gate g (1-based, multi.lua only): an allow match there
--                   lets it through uncharged
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
    elseif name == 'spend' or name == 'credit' then
      if item.lease_key then
        error('edgelimit: an item spends or credits its capacity lease, not both')
      end
      if name == 'spend' then
        item.spend = int_arg(value)
        if item.spend ~= 1 and item.spend ~= 2 then
          error('edgelimit: unknown lease spending')
        end
      else
        item.credit = int_arg(value)
      end
      item.lease_key = KEYS[k]
      k = k + 1
    elseif name == 'gate' then
      item.gate = int_arg(value)
    elseif name == 'rq' then
      item.remember = int_arg(value)
      item.rq_key = KEYS[k]
      k = k + 1
    elseif name == 'ctl' then
      item.tiers = value or ''
      item.ctl_key = KEYS[k]
      k = k + 1
    elseif name == 'block' then
      item.block_ms = int_arg(value)
      item.block_key = KEYS[k]
      k = k + 1
    elseif name == 'delay' then
      item.delay = int_arg(value)
    else
      error('edgelimit: unknown item option')
    end
  end
  if not item.key or (item.remember and not item.rq_key) or (item.tiers and not item.ctl_key)
      or ((item.spend or item.credit) and not item.lease_key)
      or (item.block_ms and not item.block_key) then
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
    local d = step(item.raw, item.limit, item.window, item.cap, now, 0, nil, item.delay)
    cost = math.min(cost, d[3])
  end
  return step(item.raw, item.limit, item.window, item.cap, now, cost, item.lease, item.delay)
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

-- Deny and allow lists (docs/design.md section "Deny and allow lists"). A list is a sorted set
-- at its own key: member = entry text, score = the epoch ms it lapses at (2^53 - 1: never).
-- Expiry is data: a member is live while its score is above now; Redis TTLs only collect
-- garbage. Kept in step with src/control/list.rs.
local LISTED_NO, LISTED_DENIED, LISTED_ALLOWED = 0, 1, 2
-- Decision reasons of listed items, beside ADMITTED, OVER_LIMIT, COST_EXCEEDS_CAPACITY.
local DENYLISTED, ALLOWLISTED = 3, 4

-- The 1-based index of the first of `cands` that is a live member of the list at `key`, or 0.
local function first_live(key, cands, now)
  if #cands == 0 then
    return 0
  end
  local scores = redis.call('ZMSCORE', key, unpack(cands))
  for i = 1, #cands do
    local score = scores[i]
    if score and tonumber(score) > now then
      return i
    end
  end
  return 0
end

-- The gate section of a multi-limit call, from ARGV[a] on: the number of list keys (they come
-- first in KEYS), the number of candidates and the candidates (every member an entry matching
-- the request could have), the number of gates, then per gate its deny lists and its allow
-- lists, each as a count and that many indexes into KEYS. Returns the gates and where the items'
-- arguments and keys begin.
local function read_gates(a)
  local nkeys, ncand = int_arg(ARGV[a]), int_arg(ARGV[a + 1])
  a = a + 2
  local gates = { cands = {} }
  for i = 1, ncand do
    gates.cands[i] = ARGV[a]
    a = a + 1
  end
  gates.n = int_arg(ARGV[a])
  a = a + 1
  for g = 1, gates.n do
    local gate = {}
    for _, kind in ipairs({ 'deny', 'allow' }) do
      local lists = {}
      local m = int_arg(ARGV[a])
      a = a + 1
      for j = 1, m do
        local index = int_arg(ARGV[a])
        a = a + 1
        if index < 1 or index > nkeys then
          error('edgelimit: bad list key index')
        end
        lists[j] = index
      end
      gate[kind] = lists
    end
    gates[g] = gate
  end
  return gates, a, nkeys + 1
end

-- What each gate finds at `now`: { kind, position of the list among the gate's deny (or allow)
-- lists, matching member }, deny lists first, the first match winning (deny beats allow), as
-- control::list::resolve. Each list is asked once, however many gates name it. Also returns
-- whether any gate denied.
local function decide_gates(gates, now)
  local asked = {}
  local function hit(index)
    if asked[index] == nil then
      asked[index] = first_live(KEYS[index], gates.cands, now)
    end
    return asked[index]
  end
  local listed, denied = {}, false
  for g = 1, gates.n do
    local found = { LISTED_NO, 0, '' }
    for j, index in ipairs(gates[g].deny) do
      local i = hit(index)
      if i > 0 then
        found, denied = { LISTED_DENIED, j, gates.cands[i] }, true
        break
      end
    end
    if found[1] == LISTED_NO then
      for j, index in ipairs(gates[g].allow) do
        local i = hit(index)
        if i > 0 then
          found = { LISTED_ALLOWED, j, gates.cands[i] }
          break
        end
      end
    end
    listed[g] = found
  end
  return listed, denied
end

-- A gated reply: `reply` (allowed, time, six fields per item decided) with the allowlisted
-- items' decisions put back in their places, then three values per gate (kind, list position,
-- member).
local function gated_reply(all, reply, listed)
  local out = { reply[1], reply[2] }
  local at = 3
  for i = 1, #all do
    local d = all[i].listed_d
    if not d then
      d = { reply[at], reply[at + 1], reply[at + 2], reply[at + 3], reply[at + 4], reply[at + 5] }
      at = at + 6
    end
    for j = 1, 6 do
      out[#out + 1] = d[j]
    end
  end
  for g = 1, #listed do
    for j = 1, 3 do
      out[#out + 1] = listed[g][j]
    end
  end
  return out
end
