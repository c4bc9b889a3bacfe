-- The node registry says what each node runs (rolling upgrades: which netclaw, which
-- forwarding protocol) and whether it is draining (it takes no new sessions). Additive:
-- a node of the previous release keeps working with it (its rows get the defaults).
ALTER TABLE nodes ADD COLUMN version TEXT;
ALTER TABLE nodes ADD COLUMN protocol INTEGER NOT NULL DEFAULT 1;
ALTER TABLE nodes ADD COLUMN draining BOOLEAN NOT NULL DEFAULT false;
