-- Fixed window: the Lua twin of src/algorithm/fixed_window.rs.
--
-- KEYS[1]  the state key, "<seen_ms> <count>"
-- ARGV[1]  now_ms, or '' to take Redis TIME
-- ARGV[2]  limit L      ARGV[3]  window W (ms)      ARGV[4]  capacity (= L)      ARGV[5]  cost
--
-- docs/design.md section 2: window k = floor(t / W); admitted iff (cost admitted in window k) + c <= L;
-- reset_at = (k+1)*W; a denied request may retry at the start of the next window.
-- Denied requests consume nothing; time going backwards counts as no time passed.
local function fixed_window(raw, L, W, cap, now, cost)
  local seen, count = 0, 0
  if raw then
    local f = parse_fields(raw, 2)
    seen, count = f[1], f[2]
  end
  local t = math.max(now, seen)
  local start = t - imod(t, W)
  local finish = start + W
  local used = 0
  if seen >= start then
    used = count
  end
  local d, new_count
  if cost > 0 then
    if cost > L then
      d = too_costly(cap, sat_sub(L, used), finish)
    elseif used + cost <= L then
      new_count = used + cost
      d = admitted(cap, L - new_count, finish)
    else
      d = over_limit(cap, sat_sub(L, used), finish, finish - t)
    end
  elseif cost == 0 then
    d = admitted(cap, sat_sub(L, used), finish)
  else
    local left = used - math.min(used, -cost)
    d = admitted(cap, sat_sub(L, left), finish)
    if left ~= used then
      new_count = left
    end
  end
  local value
  if new_count then
    value = fmt(t) .. ' ' .. fmt(new_count)
  end
  return d, value, finish
end
