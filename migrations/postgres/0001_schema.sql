-- The PostgreSQL schema: the same records as the SQLite one (migrations/sqlite, 0001-0010),
-- for several daemons sharing one database. Payloads stay JSON text, as written: the
-- journal never needs to know what an event means (usage reads them with ::jsonb).

CREATE TABLE events (
    persistence_id TEXT             NOT NULL,
    seq            BIGINT           NOT NULL CHECK (seq > 0),
    type           TEXT             NOT NULL,
    payload        TEXT             NOT NULL,
    ts             DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (persistence_id, seq)
);
CREATE INDEX events_turns ON events (ts) WHERE type = 'TurnRecorded';

CREATE TABLE snapshots (
    persistence_id TEXT             PRIMARY KEY,
    seq            BIGINT           NOT NULL,
    state          TEXT             NOT NULL,
    ts             DOUBLE PRECISION NOT NULL
);

CREATE TABLE snapshot_messages (
    persistence_id TEXT    NOT NULL,
    idx            INTEGER NOT NULL,
    message        TEXT    NOT NULL,
    PRIMARY KEY (persistence_id, idx)
);

CREATE TABLE sessions (
    id            TEXT             PRIMARY KEY,
    channel       TEXT             NOT NULL,
    title         TEXT,
    turns         INTEGER          NOT NULL DEFAULT 0,
    last_activity DOUBLE PRECISION NOT NULL,
    pending       INTEGER          NOT NULL DEFAULT 0,
    last_seq      BIGINT           NOT NULL,
    undelivered   INTEGER          NOT NULL DEFAULT 0
);
CREATE INDEX sessions_pending ON sessions (pending) WHERE pending > 0;
CREATE INDEX sessions_undelivered ON sessions (channel) WHERE undelivered > 0;

-- Memory: full-text search over a generated tsvector ('english': stemming like SQLite's
-- porter tokenizer), the same audience / scope rules as the SQLite store.
CREATE TABLE memories (
    id         BIGSERIAL        PRIMARY KEY,
    text       TEXT             NOT NULL,
    kind       TEXT             NOT NULL
               CHECK (kind IN ('fact', 'decision', 'action_item', 'preference', 'note')),
    session_id TEXT             NOT NULL,
    audience   TEXT             NOT NULL,
    created    DOUBLE PRECISION NOT NULL,
    norm       TEXT             NOT NULL,
    turn       INTEGER,
    scope      TEXT,
    search     TSVECTOR GENERATED ALWAYS AS (to_tsvector('english', text)) STORED
);
CREATE UNIQUE INDEX memories_audience_norm ON memories (audience, norm);
CREATE INDEX memories_session ON memories (session_id);
CREATE INDEX memories_scope ON memories (audience, scope);
CREATE INDEX memories_search ON memories USING GIN (search);

CREATE TABLE webhook_deliveries (
    route       TEXT             NOT NULL,
    key         TEXT             NOT NULL,
    session_id  TEXT             NOT NULL,
    created     DOUBLE PRECISION NOT NULL,
    body_sha256 TEXT,
    PRIMARY KEY (route, key)
);
CREATE INDEX webhook_deliveries_created ON webhook_deliveries (created);

CREATE TABLE webhook_signatures (
    route     TEXT             NOT NULL,
    signature TEXT             NOT NULL,
    key       TEXT             NOT NULL,
    expires   DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (route, signature)
);
CREATE INDEX webhook_signatures_expires ON webhook_signatures (expires);

-- Per node: each daemon warms what it had resident when it stopped.
CREATE TABLE warm_manifest (
    node_id    TEXT             NOT NULL,
    session_id TEXT             NOT NULL,
    stopped_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (node_id, session_id)
);

CREATE TABLE reminders (
    id         TEXT             PRIMARY KEY,
    session_id TEXT             NOT NULL,
    text       TEXT             NOT NULL,
    schedule   TEXT             NOT NULL,
    next_fire  DOUBLE PRECISION,
    catch_up   TEXT             NOT NULL DEFAULT 'latest',
    created_by TEXT             NOT NULL,
    name       TEXT,
    deliver    TEXT,
    created_at DOUBLE PRECISION NOT NULL,
    fired      INTEGER          NOT NULL DEFAULT 0
);
CREATE INDEX reminders_due ON reminders (next_fire) WHERE next_fire IS NOT NULL;
CREATE INDEX reminders_session ON reminders (session_id);
