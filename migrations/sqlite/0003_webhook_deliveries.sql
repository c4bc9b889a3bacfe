-- Webhook deliveries by Idempotency-Key: a repeated key for the same route goes to the
-- session of its first delivery (where the session's replay identity answers it), even
-- when the route gives every delivery its own session.
CREATE TABLE webhook_deliveries (
    route      TEXT NOT NULL,
    key        TEXT NOT NULL,
    session_id TEXT NOT NULL,
    created    REAL NOT NULL,
    PRIMARY KEY (route, key)
) WITHOUT ROWID;

CREATE INDEX webhook_deliveries_created ON webhook_deliveries (created);
