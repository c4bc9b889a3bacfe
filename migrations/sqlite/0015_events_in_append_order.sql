-- The journal's events in the order they were written (a rowid table), so a commit's new
-- rows land on the table's last page instead of one page per session; (persistence_id,
-- seq) stays unique through an index. Same columns: code of the previous release runs on it.
-- The rows there are copied session by session (the old key's order, no sort): an old
-- session's events stay together for its replay.
CREATE TABLE events_appended (
    id             INTEGER PRIMARY KEY,
    persistence_id TEXT    NOT NULL,
    seq            INTEGER NOT NULL CHECK (seq > 0),
    type           TEXT    NOT NULL,
    payload        TEXT    NOT NULL,  -- JSON
    ts             REAL    NOT NULL   -- unix seconds when written
);
INSERT INTO events_appended (persistence_id, seq, type, payload, ts)
    SELECT persistence_id, seq, type, payload, ts FROM events ORDER BY persistence_id, seq;
DROP TABLE events;
ALTER TABLE events_appended RENAME TO events;
CREATE UNIQUE INDEX events_key ON events (persistence_id, seq);
CREATE INDEX events_spend ON events (ts) WHERE type IN ('TurnRecorded', 'SessionCompacted', 'SpeechTranscribed', 'ReplySpoken');

-- A snapshot's transcript rows likewise.
CREATE TABLE snapshot_messages_appended (
    id             INTEGER PRIMARY KEY,
    persistence_id TEXT    NOT NULL,
    idx            INTEGER NOT NULL,
    message        TEXT    NOT NULL
);
INSERT INTO snapshot_messages_appended (persistence_id, idx, message)
    SELECT persistence_id, idx, message FROM snapshot_messages ORDER BY persistence_id, idx;
DROP TABLE snapshot_messages;
ALTER TABLE snapshot_messages_appended RENAME TO snapshot_messages;
CREATE UNIQUE INDEX snapshot_messages_key ON snapshot_messages (persistence_id, idx);

-- Which sessions owe a turn or a reply is asked at start-up only, and a turn changes both
-- counts twice: a scan of the sessions table there is cheaper than these indexes here.
DROP INDEX sessions_pending;
DROP INDEX sessions_undelivered;
