-- When a memory was last recalled into a turn or found by the search_memory tool (saved at
-- most once a day each): with `created` and `confirmed`, what recall prefers among close
-- memories and what an audience over memory.max_per_audience forgets last.
ALTER TABLE memories ADD COLUMN used DOUBLE PRECISION;
