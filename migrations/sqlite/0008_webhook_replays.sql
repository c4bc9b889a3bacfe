-- Webhook hardening: a signed request is accepted once (its signature remembered for the
-- timestamp window), and an Idempotency-Key remembers the body it came with (a reuse with
-- another body is refused).
CREATE TABLE webhook_signatures (
    route     TEXT NOT NULL,
    signature TEXT NOT NULL,
    key       TEXT NOT NULL,   -- the idempotency key of the first delivery with this signature
    expires   REAL NOT NULL,   -- unix time after which the signature is stale anyway
    PRIMARY KEY (route, signature)
) WITHOUT ROWID;

CREATE INDEX webhook_signatures_expires ON webhook_signatures (expires);

ALTER TABLE webhook_deliveries ADD COLUMN body_sha256 TEXT;
