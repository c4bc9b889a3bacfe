-- Usage reads the events that record spend (turns, and compactions that called a model) by
-- time; replaces events_turns, which knew only turns.
CREATE INDEX events_spend ON events (ts) WHERE type IN ('TurnRecorded', 'SessionCompacted');
DROP INDEX events_turns;
