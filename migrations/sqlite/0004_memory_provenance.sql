-- Provenance of a memory: the turn of its session it was learnt in (NULL for memories
-- saved before this migration), so "why do you know that?" has an answer.
ALTER TABLE memories ADD COLUMN turn INTEGER;

CREATE INDEX memories_session ON memories (session_id);
