-- Sliding window log: the Lua twin of src/algorithm/sliding_log.rs.
--
-- KEYS[1]  the state key, "<seen_ms> <time_1> <cost_1> <time_2> <cost_2> ...", oldest first
-- ARGV[1]  now_ms, or '' to take Redis TIME
-- ARGV[2]  limit L      ARGV[3]  window W (ms)      ARGV[4]  capacity (= L)      ARGV[5]  cost
--
-- docs/design.md section 2: admitted iff (cost admitted at times s with t - W < s <= t) + c <= L; a request
-- exactly W ms old no longer counts. Entries that left the window are dropped only when the state
-- is written, never on a denial or a look, exactly as the Rust step.
-- Denied requests consume nothing; time going backwards counts as no time passed.
local function sliding_log(raw, L, W, cap, now, cost)
  local seen, n, total, times, costs = parse_pairs(raw)
  local t = math.max(now, seen)
  -- Leading entries at or before t - W have left the window.
  local expired, expired_cost = 0, 0
  if t >= W then
    local cutoff = t - W
    for i = 1, n do
      if times[i] > cutoff then
        break
      end
      expired = expired + 1
      expired_cost = expired_cost + costs[i]
    end
  end
  local used = total - expired_cost
  local function reset_at(live)
    if live and n > 0 then
      return times[n] + W
    end
    return t
  end
  local standing = reset_at(used > 0)
  local function drop_expired()
    if expired > 0 then
      local kept_times, kept_costs = {}, {}
      for i = expired + 1, n do
        kept_times[i - expired], kept_costs[i - expired] = times[i], costs[i]
      end
      times, costs, n = kept_times, kept_costs, n - expired
      total = total - expired_cost
    end
    seen = t
  end
  local d
  local changed = false
  if cost > 0 then
    if cost > L then
      d = too_costly(cap, sat_sub(L, used), standing)
    elseif used + cost <= L then
      drop_expired()
      if n > 0 and times[n] == t then
        costs[n] = costs[n] + cost
      else
        n = n + 1
        times[n], costs[n] = t, cost
      end
      total = total + cost
      changed = true
      d = admitted(cap, sat_sub(L, total), t + W)
    else
      -- The request fits once enough of the oldest entries have left the window.
      local left, retry_at = used, t
      for i = expired + 1, n do
        left = left - costs[i]
        if left + cost <= L then
          retry_at = times[i] + W
          break
        end
      end
      d = over_limit(cap, sat_sub(L, used), standing, retry_at - t)
    end
  elseif cost == 0 then
    d = admitted(cap, sat_sub(L, used), standing)
  else
    -- Give back the newest cost first; only cost still in the window can be given back.
    local given = math.min(-cost, used)
    if given > 0 then
      changed = true
      drop_expired()
    end
    local r = given
    while r > 0 and n > 0 do
      local take = math.min(r, costs[n])
      costs[n] = costs[n] - take
      total = total - take
      r = r - take
      if costs[n] == 0 then
        times[n], costs[n] = nil, nil
        n = n - 1
      end
    end
    d = admitted(cap, sat_sub(L, used - given), reset_at(used - given > 0))
  end
  if not changed then
    return d, nil, standing
  end
  local parts = { fmt(seen) }
  for i = 1, n do
    parts[2 * i], parts[2 * i + 1] = fmt(times[i]), fmt(costs[i])
  end
  return d, table.concat(parts, ' '), reset_at(total > 0)
end
