-- Token bucket: the Lua twin of src/algorithm/token_bucket.rs.
--
-- KEYS[1]  the state key, "<seen_ms> <deficit> <capacity>", deficit = (B - tokens)*W written
--          at capacity B*W (an older "<seen_ms> <deficit>" is read at the policy's capacity)
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

-- ceil(a * b / c), exactly, for 0 <= a <= c and b, c <= 2^50 (c > 0): the product may pass
-- 2^53, so it is built one bit of b at a time, the remainder kept below c.
local function mul_div_ceil(a, b, c)
  local bits, n = {}, 0
  while b > 0 do
    local bit = b % 2
    n = n + 1
    bits[n] = bit
    b = (b - bit) / 2
  end
  local q, r = 0, 0
  for i = n, 1, -1 do
    q, r = 2 * q, 2 * r
    if r >= c then
      q, r = q + 1, r - c
    end
    if bits[i] == 1 then
      r = r + a
      if r >= c then
        q, r = q + 1, r - c
      end
    end
  end
  if r > 0 then
    q = q + 1
  end
  return q
end

-- A deficit written at capacity `from`, as the same share of capacity `to`, rounded up, as
-- token_bucket::rescale (docs/design.md section 2, "Policy changes"). `from` 0: not recorded.
local function bucket_rescale(deficit, from, to)
  if from == 0 or from == to then
    return deficit
  end
  return mul_div_ceil(math.min(deficit, from), to, from)
end

local function token_bucket(raw, L, W, B, now, cost)
  local seen, stored, written_at = 0, 0, 0
  if raw then
    local f = parse_fields(raw, nil)
    if #f ~= 2 and #f ~= 3 then
      error('edgelimit: unreadable limiter state')
    end
    seen, stored, written_at = f[1], f[2], f[3] or 0
  end
  local t = math.max(now, seen)
  local capacity = B * W
  stored = bucket_rescale(stored, written_at, capacity)
  local deficit = bucket_refill(stored, t - seen, L)
  local d, after = bucket_decide(L, W, B, deficit, t, cost)
  local value
  if after ~= deficit then
    value = fmt(t) .. ' ' .. fmt(after) .. ' ' .. fmt(capacity)
  end
  return d, value, d[4]
end
