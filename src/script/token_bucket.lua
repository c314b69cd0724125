-- Token bucket: the Lua twin of src/algorithm/token_bucket.rs.
--
-- KEYS[1]  the state key, "<seen_ms> <deficit>", deficit = (B - tokens)*W
-- ARGV[1]  now_ms, or '' to take Redis TIME
-- ARGV[2]  refill L per window      ARGV[3]  window W (ms)      ARGV[4]  burst B      ARGV[5]  cost
--
-- docs/design.md section 2: tokens(t) = min(B, tokens + (t - last)*L/W), continuous; admitted iff tokens(t) >= c.
-- Held as a deficit scaled by W, refilling L per ms: integers only. Decides exactly as GCRA.
-- Denied requests consume nothing; time going backwards counts as no time passed.

-- The deficit `elapsed` ms after it stood at `deficit`. Compares with the division instead of
-- forming elapsed*L, which can pass 2^53.
local function bucket_refill(deficit, elapsed, L)
  if elapsed >= ceil_div(deficit, L) then
    return 0
  end
  return deficit - elapsed * L
end

-- The decision for a bucket with `deficit` at t (after refill) and the deficit afterwards.
local function bucket_decide(L, W, B, deficit, t, cost)
  local capacity = B * W
  -- A stored deficit above capacity (the burst was lowered under a live key) is a full debt.
  deficit = math.min(deficit, capacity)
  local function remaining(d)
    return idiv(capacity - d, W)
  end
  local function full_at(d)
    return t + ceil_div(d, L)
  end
  if cost > 0 then
    if cost > B then
      return too_costly(B, remaining(deficit), full_at(deficit)), deficit
    end
    local d = deficit + cost * W
    if d <= capacity then
      return admitted(B, remaining(d), full_at(d)), d
    end
    local wait = ceil_div(d - capacity, L)
    return over_limit(B, remaining(deficit), full_at(deficit), wait), deficit
  elseif cost == 0 then
    return admitted(B, remaining(deficit), full_at(deficit)), deficit
  end
  local d = deficit - math.min(deficit, math.min(-cost, B) * W)
  return admitted(B, remaining(d), full_at(d)), d
end

local function token_bucket(raw, L, W, B, now, cost)
  local seen, stored = 0, 0
  if raw then
    local f = parse_fields(raw, 2)
    seen, stored = f[1], f[2]
  end
  local t = math.max(now, seen)
  local deficit = bucket_refill(stored, t - seen, L)
  local d, after = bucket_decide(L, W, B, deficit, t, cost)
  local value
  if after ~= deficit then
    value = fmt(t) .. ' ' .. fmt(after)
  end
  return d, value, d[4]
end
