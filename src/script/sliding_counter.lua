-- Sliding window counter: the Lua twin of src/algorithm/sliding_counter.rs.
--
-- KEYS[1]  the state key, "<seen_ms> <previous> <current>"
-- ARGV[1]  now_ms, or '' to take Redis TIME
-- ARGV[2]  limit L      ARGV[3]  window W (ms)      ARGV[4]  capacity (= L)      ARGV[5]  cost
--
-- docs/design.md section 2: with k = floor(t / W), e = t - k*W, p and q the cost admitted in windows k-1 and k:
-- admitted iff p*(W - e) + (q + c)*W <= L*W. Every product is at most L*W <= 2^50.
-- Denied requests consume nothing; time going backwards counts as no time passed.

-- The earliest time a denied request of cost c (<= L) fits (see retry_at in the Rust step).
local function sliding_counter_retry_at(p, q, c, L, W, e, start)
  if p > 0 and q + c <= L then
    local slack = idiv((L - q - c) * W, p)
    if slack >= 1 then
      return start + math.max(W - math.min(slack, W), e + 1)
    end
  end
  local next_start = start + W
  if q == 0 then
    return next_start
  end
  local slack = idiv((L - c) * W, q)
  return next_start + (W - math.min(slack, W))
end

local function sliding_counter(raw, L, W, cap, now, cost)
  local seen, previous, current = 0, 0, 0
  if raw then
    local f = parse_fields(raw, 3)
    seen, previous, current = f[1], f[2], f[3]
  end
  local t = math.max(now, seen)
  local e = imod(t, W)
  local start = t - e
  local seen_start = seen - imod(seen, W)
  local p, q = 0, 0
  if seen_start == start then
    p, q = previous, current
  elseif seen_start + W == start then
    p, q = current, 0
  end
  -- Counts above the limit (lowered under a live key) are capped, as in the Rust step.
  p, q = math.min(p, L), math.min(q, L)
  local budget = L * W
  local used = p * (W - e) + q * W
  local function remaining(u)
    return idiv(budget - math.min(u, budget), W)
  end
  local function reset_at(pp, qq)
    if qq > 0 then
      return start + 2 * W
    elseif pp > 0 then
      return start + W
    end
    return t
  end
  local d, wp, wq
  if cost > 0 then
    if cost > L then
      d = too_costly(cap, remaining(used), reset_at(p, q))
    elseif used + cost * W <= budget then
      wp, wq = p, q + cost
      d = admitted(cap, remaining(used + cost * W), reset_at(p, q + cost))
    else
      local retry = sliding_counter_retry_at(p, q, cost, L, W, e, start)
      d = over_limit(cap, remaining(used), reset_at(p, q), retry - t)
    end
  elseif cost == 0 then
    d = admitted(cap, remaining(used), reset_at(p, q))
  else
    -- Give back the current window's cost first, then the previous window's.
    local r = -cost
    local from_q = math.min(r, q)
    local from_p = math.min(r - from_q, p)
    local p2, q2 = p - from_p, q - from_q
    if from_p + from_q > 0 then
      wp, wq = p2, q2
    end
    d = admitted(cap, remaining(p2 * (W - e) + q2 * W), reset_at(p2, q2))
  end
  local value
  if wp then
    value = fmt(t) .. ' ' .. fmt(wp) .. ' ' .. fmt(wq)
    return d, value, reset_at(wp, wq)
  end
  return d, value, reset_at(p, q)
end
