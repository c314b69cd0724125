-- GCRA: the Lua twin of src/algorithm/gcra.rs.
--
-- KEYS[1]  the state key, "<tat_ms> <tat_rem> <seen_ms>": TAT = tat_ms + tat_rem/L exactly
-- ARGV[1]  now_ms, or '' to take Redis TIME
-- ARGV[2]  limit L      ARGV[3]  window W (ms)      ARGV[4]  burst B      ARGV[5]  cost
--
-- docs/design.md section 2: emission interval T = W/L; admitted iff max(TAT, t) + c*T - t <= B*T; on admission
-- TAT <- max(TAT, t) + c*T. With B = L it admits L at once, then one every T. TAT, T and the
-- tolerance B*T are held as exact fractions (whole ms, remainder in 1/L ms), as in the Rust step;
-- reset_at = max(ceil(TAT), t); a denied request may retry at ceil(TAT + c*T - B*T).
-- Denied requests consume nothing; time going backwards counts as no time passed.
--
-- A delaying limit (option `delay <D>`, docs/design.md section 2, "Delays") admits iff
-- max(TAT, t) + c*T - t <= B*T + D, moving TAT on as ever; past B*T its wait is
-- ceil(TAT' - B*T) - t and it is DELAYED with that retry; beyond D it is denied as above. Every
-- max(TAT, t) is read as at most t + B*T + D, so no charge forgives the queue.

-- Fractions are (whole, rem) pairs with 0 <= rem < L.
local function frac_add(aw, ar, bw, br, L)
  local r = ar + br
  if r >= L then
    return aw + bw + 1, r - L
  end
  return aw + bw, r
end

-- a - b for a >= b.
local function frac_sub(aw, ar, bw, br, L)
  if ar >= br then
    return aw - bw, ar - br
  end
  return aw - bw - 1, ar + L - br
end

local function frac_le(aw, ar, bw, br)
  return aw < bw or (aw == bw and ar <= br)
end

-- n*T for n <= B: n*rem and n*whole are at most B*W <= 2^50.
local function frac_times(n, iw, ir, L)
  if n == 1 then
    return iw, ir
  end
  local r = n * ir
  local q = idiv(r, L)
  return n * iw + q, r - q * L
end

local function frac_ceil(w, r)
  if r > 0 then
    return w + 1
  end
  return w
end

local function gcra(raw, L, W, B, now, cost, _, delay)
  local tat_w, tat_r, seen = 0, 0, 0
  if raw then
    local f = parse_fields(raw, 3)
    tat_w, tat_r, seen = f[1], f[2], f[3]
  end
  local t = math.max(now, seen)
  -- A remainder from a larger limit (changed under a live key) is capped, as in the Rust step.
  tat_r = math.min(tat_r, L - 1)
  -- max(TAT, t): TAT < t exactly when its whole part is below t.
  local base_w, base_r = t, 0
  if tat_w >= t then
    base_w, base_r = tat_w, tat_r
  end
  local iw = idiv(W, L)
  local ir = W - iw * L
  local BW = B * W
  local tw = idiv(BW, L)
  local tr = BW - tw * L
  -- The latest TAT an admission may leave: t + B*T, plus the longest wait. A debt beyond it (the
  -- policy changed to a smaller one under a live key) is a full debt, as in the Rust step
  -- (docs/design.md section 2, "Policy changes").
  local capw, capr = frac_add(t, 0, tw, tr, L)
  local plainw, plainr = capw, capr
  capw = capw + (delay or 0)
  if not frac_le(base_w, base_r, capw, capr) then
    base_w, base_r = capw, capr
  end
  -- floor((B*W - (TAT - t)*L) / W), 0 once the deficit reaches B*W; the product is formed only
  -- when it cannot pass B*W (<= 2^50).
  local function remaining(aw, ar)
    local dw, dr = frac_sub(aw, ar, t, 0, L)
    if dw > tw then
      return 0
    end
    return idiv(sat_sub(BW, dw * L + dr), W)
  end
  local function reset_at(aw, ar)
    return math.max(frac_ceil(aw, ar), t)
  end
  local d, ww, wr
  if cost > 0 then
    if cost > B then
      d = too_costly(B, remaining(base_w, base_r), reset_at(base_w, base_r))
    else
      local cw, cr = frac_times(cost, iw, ir, L)
      local nw, nr = frac_add(base_w, base_r, cw, cr, L)
      if frac_le(nw, nr, capw, capr) then
        ww, wr = nw, nr
        if frac_le(nw, nr, plainw, plainr) then
          d = admitted(B, remaining(nw, nr), reset_at(nw, nr))
        else
          local rw, rr = frac_sub(nw, nr, tw, tr, L)
          d = delayed(B, remaining(nw, nr), reset_at(nw, nr), frac_ceil(rw, rr) - t)
        end
      else
        local rw, rr = frac_sub(nw, nr, tw, tr, L)
        d = over_limit(B, remaining(base_w, base_r), reset_at(base_w, base_r),
          frac_ceil(rw, rr) - t)
      end
    end
  elseif cost == 0 then
    d = admitted(B, remaining(base_w, base_r), reset_at(base_w, base_r))
  else
    local bw, br = frac_times(math.min(-cost, B), iw, ir, L)
    local aw, ar = frac_add(t, 0, bw, br, L)
    local ew, er = t, 0
    if frac_le(aw, ar, base_w, base_r) then
      ew, er = frac_sub(base_w, base_r, bw, br, L)
    end
    if ew ~= base_w or er ~= base_r then
      ww, wr = ew, er
    end
    d = admitted(B, remaining(ew, er), reset_at(ew, er))
  end
  local value
  if ww then
    value = fmt(ww) .. ' ' .. fmt(wr) .. ' ' .. fmt(t)
  end
  return d, value, d[4]
end
