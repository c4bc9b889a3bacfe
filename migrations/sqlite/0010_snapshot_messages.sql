-- A snapshot's transcript, one row per message, written once: a session's transcript only
-- grows, so each snapshot adds the messages since the last one and rewrites only the small
-- rest of the state (snapshots.state, which names how many of these rows it covers).
CREATE TABLE snapshot_messages (
    persistence_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    message TEXT NOT NULL,
    PRIMARY KEY (persistence_id, idx)
) WITHOUT ROWID;
