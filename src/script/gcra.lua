-- GCRA: the Lua twin of src/algorithm/gcra.rs. Needs bucket_decide from token_bucket.lua.
--
-- KEYS[1]  the state key, "<tat_ms> <tat_rem> <seen_ms>": TAT = tat_ms + tat_rem/L exactly
-- ARGV[1]  now_ms, or '' to take Redis TIME
-- ARGV[2]  limit L      ARGV[3]  window W (ms)      ARGV[4]  burst B      ARGV[5]  cost
--
-- DESIGN 2: emission interval T = W/L; admitted iff max(TAT, t) + c*T - t <= B*T; on admission
-- TAT <- max(TAT, t) + c*T. The deficit (TAT - t)*L is the token bucket's, so both decide alike.
-- Denied requests consume nothing; time going backwards counts as no time passed.
local function gcra(raw, L, W, B, now, cost)
  local tat, rem, seen = 0, 0, 0
  if raw then
    local f = parse_fields(raw, 3)
    tat, rem, seen = f[1], f[2], f[3]
  end
  local t = math.max(now, seen)
  local capacity = B * W
  local deficit = 0
  if tat >= t then
    local ahead = tat - t
    if ahead > idiv(capacity, L) then
      -- (TAT - t)*L would pass the capacity (and maybe 2^53): the Rust step saturates, and any
      -- deficit above capacity decides alike and always rewrites the state.
      deficit = capacity + 1
    else
      deficit = ahead * L + rem
    end
  end
  local d, after = bucket_decide(L, W, B, deficit, t, cost)
  local value
  if after ~= deficit then
    local whole = idiv(after, L)
    value = fmt(t + whole) .. ' ' .. fmt(after - whole * L) .. ' ' .. fmt(t)
  end
  return d, value, d[4]
end
