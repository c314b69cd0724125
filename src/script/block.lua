-- Blocks: the Lua twin of decide_blocking_into in src/store/batch.rs (docs/design.md section 2,
-- "Blocks"), for every deciding script.
--
-- KEYS     the item's block key, {el:<ns>:<limit>:<id>}:block, "<end_ms>": the item's key after
--          its control key (read_item in prelude.lua)
-- option   block <ms>   sent only for a request of positive cost on a limit with a block
--                       duration: no other item reads a block key
--
-- An item blocked at now (now < end: the end is data, the key's TTL only collects garbage) is
-- denied BLOCKED and charges nothing: its decision is the one its step gives on its unchanged
-- state and lease, with remaining 0, reset_at the later of the step's and the block's end, and
-- retry the later of end - now and the step's own retry (a cost above capacity stays
-- COST_EXCEEDS_CAPACITY). A blocked item never writes its block, so a block is not extended.
-- An item whose own decision is OVER_LIMIT starts a block ending at now + ms (item.block_end),
-- which the main writes even when the check writes nothing else; that denial's reset_at and
-- retry are at least the block's end.

-- The decision reason of a blocked item, beside ADMITTED, OVER_LIMIT, ..., LEASED.
local BLOCKED = 6

-- Decides one item with its block: returns as decide_unblocked (capacity_lease.lua), and leaves
-- a block to start in item.block_end.
local function decide_item(item, now)
  local d, value, expire_at = decide_unblocked(item, now)
  if not item.block_ms then
    return d, value, expire_at
  end
  local raw = redis.call('GET', item.block_key)
  local ending = 0
  if raw then
    ending = parse_fields(raw, 1)[1]
  end
  if now < ending then
    -- Decided as a trial only: nothing of it is written.
    item.lease_value = nil
    if d[6] == COST_EXCEEDS_CAPACITY then
      return d, nil, nil
    end
    local retry = ending - now
    if d[1] == 0 and d[5] > retry then
      retry = d[5]
    end
    return { 0, d[2], 0, math.max(d[4], ending), retry, BLOCKED }, nil, nil
  end
  if d[6] == OVER_LIMIT then
    -- The denial that starts the block tells the client its end.
    item.block_end = now + item.block_ms
    d = { d[1], d[2], d[3], math.max(d[4], item.block_end), math.max(d[5], item.block_ms), d[6] }
  end
  return d, value, expire_at
end

-- Writes the block an item's denial started, if any: "<end_ms>", with a TTL that only collects
-- garbage.
local function store_block(item, now)
  if item.block_end then
    store(item.block_key, fmt(item.block_end), item.block_end, now)
  end
end
