-- Reset main (docs/design.md section "Peek and reset"): deletes an identifier's state on a limit.
-- KEYS: its state key under every algorithm, then its block key (one hash tag, so one slot). The
-- request keys and the assignment are kept. Reply: how many keys existed.
return redis.call('DEL', unpack(KEYS))
