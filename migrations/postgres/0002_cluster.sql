-- Several nodes on one database: who is alive, and which node owns each resident session.
-- Times are the database's clock (clock_timestamp()), never a node's: nodes' clocks may
-- disagree, the one database cannot disagree with itself.

CREATE TABLE nodes (
    node_id       TEXT        PRIMARY KEY,
    advertise_url TEXT,
    incarnation   TEXT        NOT NULL,  -- one run of the node: a second process with the same id differs
    started_at    TIMESTAMPTZ NOT NULL,
    seen_at       TIMESTAMPTZ NOT NULL
);

-- One row per session ever owned: the epoch only grows (a released lease keeps its row,
-- expired), so a write fenced by an old epoch can never pass again.
CREATE TABLE leases (
    persistence_id TEXT        PRIMARY KEY,
    node_id        TEXT        NOT NULL,
    epoch          BIGINT      NOT NULL CHECK (epoch > 0),
    expires_at     TIMESTAMPTZ NOT NULL
);
CREATE INDEX leases_node ON leases (node_id);
