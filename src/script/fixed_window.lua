-- Fixed window: the Lua twin of src/algorithm/fixed_window.rs.
--
-- KEYS[1]  the state key, "<seen_ms> <count>"
-- ARGV[1]  now_ms, or '' to take Redis TIME
-- ARGV[2]  limit L      ARGV[3]  window W (ms, or a calendar's code)      ARGV[4]  capacity (= L)
-- ARGV[5]  cost
--
-- docs/design.md section 2: window k = floor(t / W); admitted iff (cost admitted in window k) + c <= L;
-- reset_at = (k+1)*W; a denied request may retry at the start of the next window.
-- A W at or above CALENDAR_CODE is a calendar period (Calendar::script_code in
-- src/algorithm/calendar.rs): the window is then the period containing t, from calendar_period.
-- Denied requests consume nothing; time going backwards counts as no time passed.

local CALENDAR_CODE = 1000000000000

-- The calendar period containing t (epoch ms) for the calendar code W: its start and end, epoch
-- ms, a start before the epoch read as 0. The twin of Calendar::period_of, in the same integer
-- civil-date arithmetic (Hinnant's days_from_civil / civil_from_days); every value stays
-- non-negative (local days are taken a week late, then moved back) and far below 2^53.
local calendar_period
do
  local DAY = 86400000

  local function days_from_civil(y, m, d)
    if m <= 2 then
      y = y - 1
    end
    local era = idiv(y, 400)
    local yoe = y - era * 400
    local doy = idiv(153 * imod(m + 9, 12) + 2, 5) + d - 1
    local doe = yoe * 365 + idiv(yoe, 4) - idiv(yoe, 100) + doy
    return era * 146097 + doe - 719468
  end

  local function civil_from_days(z)
    z = z + 719468
    local era = idiv(z, 146097)
    local doe = z - era * 146097
    local yoe = idiv(doe - idiv(doe, 1460) + idiv(doe, 36524) - idiv(doe, 146096), 365)
    local doy = doe - (365 * yoe + idiv(yoe, 4) - idiv(yoe, 100))
    local mp = idiv(5 * doy + 2, 153)
    local d = doy - idiv(153 * mp + 2, 5) + 1
    local y, m = yoe + era * 400, mp + 3
    if mp >= 10 then
      y, m = y + 1, mp - 9
    end
    return y, m, d
  end

  -- The day of month m of year y a period anchored on `anchor` starts: the anchor, or the
  -- month's last day when it has fewer days.
  local function start_day(y, m, anchor)
    local days = 31
    if m == 2 then
      days = 28
      if imod(y, 4) == 0 and (imod(y, 100) ~= 0 or imod(y, 400) == 0) then
        days = 29
      end
    elseif m == 4 or m == 6 or m == 9 or m == 11 then
      days = 30
    end
    return math.min(anchor, days)
  end

  local function month_start(y, m, anchor)
    return days_from_civil(y, m, start_day(y, m, anchor))
  end

  calendar_period = function(t, W)
    local rest = W - CALENDAR_CODE
    local period = idiv(rest, 10000000000)
    local a_month = imod(idiv(rest, 100000000), 100)
    local a_day = imod(idiv(rest, 1000000), 100)
    local offset = (imod(rest, 1000000) - 1440) * 60000
    local day = idiv(t + offset + 7 * DAY, DAY) - 7
    local first, after
    if period == 1 then
      -- ISO weeks: 1970-01-01 (day 0) was a Thursday, 3 days after a Monday.
      first = day - imod(day + 3, 7)
      after = first + 7
    elseif period == 2 then
      local y, m, d = civil_from_days(day)
      local here = start_day(y, m, a_day)
      if d >= here then
        first = days_from_civil(y, m, here)
        if m == 12 then
          after = month_start(y + 1, 1, a_day)
        else
          after = month_start(y, m + 1, a_day)
        end
      else
        after = days_from_civil(y, m, here)
        if m == 1 then
          first = month_start(y - 1, 12, a_day)
        else
          first = month_start(y, m - 1, a_day)
        end
      end
    elseif period == 3 then
      local y = civil_from_days(day)
      first = month_start(y, a_month, a_day)
      if day >= first then
        after = month_start(y + 1, a_month, a_day)
      else
        first, after = month_start(y - 1, a_month, a_day), first
      end
    else
      error('edgelimit: unknown calendar period')
    end
    return math.max(first * DAY - offset, 0), math.max(after * DAY - offset, 0)
  end
end

local function fixed_window(raw, L, W, cap, now, cost)
  local seen, count = 0, 0
  if raw then
    local f = parse_fields(raw, 2)
    seen, count = f[1], f[2]
  end
  local t = math.max(now, seen)
  local start, finish
  if W >= CALENDAR_CODE then
    start, finish = calendar_period(t, W)
  else
    start = t - imod(t, W)
    finish = start + W
  end
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
