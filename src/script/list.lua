-- Deny and allow list main (docs/design.md section "Deny and allow lists"): one list, at KEYS[1],
-- a sorted set of entry members scored by the epoch ms they lapse at (2^53 - 1: never).
--
-- ARGV[1] the operation, then its arguments:
--   add <now_ms> <lapse_ms> <member>  drops members lapsed at now (writers prune), adds or
--                                     re-times the member, and sets the key's TTL to collect it
--                                     a grace period after its last member lapses (none while a
--                                     member never lapses). Reply: 1.
--   remove <member>                   Reply: 1 if the member was there, else 0.
--   entries <now_ms>                  Reply: member, lapse_ms, ... for the live members, soonest
--                                     lapsing first (ties by member). Writes nothing.
--   match <now_ms or ''> <cand>...    Reply: { now, index of the first live candidate or 0 }.
--                                     Writes nothing. How a Cluster reads a list before the check.
local NEVER = 9007199254740991
local key, op = KEYS[1], ARGV[1]
if op == 'add' then
  local now, lapse, member = now_ms(ARGV[2]), int_arg(ARGV[3]), ARGV[4]
  if not member or lapse <= now then
    error('edgelimit: bad list entry')
  end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now))
  redis.call('ZADD', key, fmt(lapse), member)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  local latest = tonumber(last[2])
  if latest >= NEVER then
    redis.call('PERSIST', key)
  else
    redis.call('PEXPIRE', key, fmt(latest - now + GC_GRACE_MS))
  end
  return 1
elseif op == 'remove' then
  return redis.call('ZREM', key, ARGV[2])
elseif op == 'entries' then
  local now = now_ms(ARGV[2])
  local found = redis.call('ZRANGE', key, '(' .. fmt(now), '+inf', 'BYSCORE', 'WITHSCORES')
  local out = {}
  for i = 1, #found, 2 do
    out[#out + 1] = found[i]
    out[#out + 1] = fmt(tonumber(found[i + 1]))
  end
  return out
elseif op == 'match' then
  local now = now_ms(ARGV[2])
  local cands = {}
  for i = 3, #ARGV do
    cands[#cands + 1] = ARGV[i]
  end
  return { now, first_live(key, cands, now) }
end
error('edgelimit: unknown list operation')
