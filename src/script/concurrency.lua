-- Concurrency: the Lua twin of src/algorithm/concurrency.rs.
--
-- KEYS[1]  the state key, "<seen_ms> <end_1> <count_1> <end_2> <count_2> ...", earliest end first
-- ARGV[1]  now_ms, or '' to take Redis TIME
-- ARGV[2]  N in flight      ARGV[3]  lease timeout D (ms)      ARGV[4]  capacity (= N)
-- ARGV[5]  cost             options: `lease <end_ms>` releases up to `cost` leases ending then
--
-- docs/design.md section 2: a request of cost c at t takes c leases ending at t + D; admitted iff
-- (leases live at t) + c <= N. A lease ending at e is over at e itself. An admitted acquisition's
-- reset_at is its lease's end (its name); otherwise the end of the last live lease, or t. A denied
-- request may retry when the lease that first leaves room ends. A release frees live leases ending
-- at the named time and is a no-op otherwise; a refund frees the newest leases first. Ended
-- leases are dropped only when the state is written, exactly as the Rust step.
-- Denied requests consume nothing; time going backwards counts as no time passed.
local function concurrency(raw, N, D, cap, now, cost, lease)
  local seen, n, total, ends, counts = parse_pairs(raw)
  local t = math.max(now, seen)
  local ended_pairs, ended = 0, 0
  for i = 1, n do
    if ends[i] > t then
      break
    end
    ended_pairs = ended_pairs + 1
    ended = ended + counts[i]
  end
  local live = total - ended
  local function last_end(l)
    if l > 0 and n > 0 then
      return ends[n]
    end
    return t
  end
  local standing = last_end(live)
  local function prune()
    if ended_pairs > 0 then
      local kept_ends, kept_counts = {}, {}
      for i = ended_pairs + 1, n do
        kept_ends[i - ended_pairs], kept_counts[i - ended_pairs] = ends[i], counts[i]
      end
      ends, counts, n = kept_ends, kept_counts, n - ended_pairs
      total = total - ended
      ended_pairs, ended = 0, 0
    end
    seen = t
  end
  local d
  local changed = false
  if lease then
    local found = false
    if lease > t then
      for i = 1, n do
        if ends[i] == lease then
          found = true
        end
      end
    end
    if found and cost > 0 then
      changed = true
      prune()
      for i = 1, n do
        if ends[i] == lease then
          local freed = math.min(cost, counts[i])
          counts[i] = counts[i] - freed
          total = total - freed
          if counts[i] == 0 then
            table.remove(ends, i)
            table.remove(counts, i)
            n = n - 1
          end
          break
        end
      end
      live = total
    end
    d = admitted(cap, sat_sub(N, live), last_end(live))
  elseif cost > 0 then
    if cost > N then
      d = too_costly(cap, sat_sub(N, live), standing)
    elseif live + cost <= N then
      local finish = t + D
      prune()
      local at = n + 1
      for i = 1, n do
        if ends[i] >= finish then
          at = i
          break
        end
      end
      if at <= n and ends[at] == finish then
        counts[at] = counts[at] + cost
      else
        table.insert(ends, at, finish)
        table.insert(counts, at, cost)
        n = n + 1
      end
      total = total + cost
      changed = true
      d = admitted(cap, N - live - cost, finish)
    else
      -- Room appears as the earliest live leases end.
      local left, retry_at = live, t
      for i = 1, n do
        if ends[i] > t then
          left = left - counts[i]
          if left + cost <= N then
            retry_at = ends[i]
            break
          end
        end
      end
      d = over_limit(cap, sat_sub(N, live), standing, retry_at - t)
    end
  elseif cost == 0 then
    d = admitted(cap, sat_sub(N, live), standing)
  else
    -- The newest leases first.
    local r = math.min(-cost, live)
    if r > 0 then
      changed = true
      prune()
    end
    while r > 0 and n > 0 do
      local take = math.min(r, counts[n])
      counts[n] = counts[n] - take
      total = total - take
      r = r - take
      if counts[n] == 0 then
        ends[n], counts[n] = nil, nil
        n = n - 1
      end
    end
    if changed then
      live = total
    end
    d = admitted(cap, sat_sub(N, live), last_end(live))
  end
  if not changed then
    return d, nil, standing
  end
  local parts = { fmt(seen) }
  for i = 1, n do
    parts[2 * i], parts[2 * i + 1] = fmt(ends[i]), fmt(counts[i])
  end
  return d, table.concat(parts, ' '), last_end(total)
end
