-- Usage reads the events that record spend (turns, and compactions that called a model)
-- by time: `netclaw usage --since`, and the daemon's spend guard at start-up (today's
-- total), which must not scan the whole journal.
CREATE INDEX events_spend ON events (ts) WHERE type IN ('TurnRecorded', 'SessionCompacted');
