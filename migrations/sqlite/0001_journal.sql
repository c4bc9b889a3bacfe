-- The event journal: append-only, keyed by (persistence_id, seq).
-- Rows are never updated or deleted: compaction and trimming are events.
CREATE TABLE events (
    persistence_id TEXT    NOT NULL,
    seq            INTEGER NOT NULL CHECK (seq > 0),
    type           TEXT    NOT NULL,
    payload        TEXT    NOT NULL,  -- JSON
    ts             REAL    NOT NULL,  -- unix seconds when written
    PRIMARY KEY (persistence_id, seq)
) WITHOUT ROWID;

-- Latest snapshot per session; recovery replays events after `seq`.
CREATE TABLE snapshots (
    persistence_id TEXT    PRIMARY KEY,
    seq            INTEGER NOT NULL,
    state          TEXT    NOT NULL,  -- JSON
    ts             REAL    NOT NULL
) WITHOUT ROWID;

-- One row per session, written in the same transaction as its events, so
-- listing sessions needs no replay and start-up finds unfinished work.
CREATE TABLE sessions (
    id             TEXT    PRIMARY KEY,
    channel        TEXT    NOT NULL,
    title          TEXT,
    turns          INTEGER NOT NULL DEFAULT 0,
    last_activity  REAL    NOT NULL,
    pending        INTEGER NOT NULL DEFAULT 0,  -- admitted inputs whose turn is not recorded yet
    last_seq       INTEGER NOT NULL
) WITHOUT ROWID;

CREATE INDEX sessions_pending ON sessions (pending) WHERE pending > 0;
