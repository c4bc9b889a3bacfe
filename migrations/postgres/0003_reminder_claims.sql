-- Several nodes run the scheduler: a due reminder is claimed by one of them (SKIP LOCKED)
-- until it is fired; a claim a dead node left expires and another node fires it. The
-- fire's identity makes a repeat a duplicate the session recognises.
ALTER TABLE reminders ADD COLUMN claimed_by TEXT;
ALTER TABLE reminders ADD COLUMN claimed_until DOUBLE PRECISION;
