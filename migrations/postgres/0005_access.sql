-- Who may do what (migrations/sqlite/0011_access.sql): the audit table and named API tokens.
CREATE TABLE audit (
    id         BIGSERIAL        PRIMARY KEY,
    at         DOUBLE PRECISION NOT NULL,
    kind       TEXT             NOT NULL,
    actor      TEXT             NOT NULL,
    session_id TEXT,
    detail     TEXT             NOT NULL,
    key        TEXT             UNIQUE
);
CREATE INDEX audit_at ON audit (at);

CREATE TABLE api_tokens (
    name       TEXT             PRIMARY KEY,
    role       TEXT             NOT NULL,
    hash       TEXT             NOT NULL UNIQUE,
    created_at DOUBLE PRECISION NOT NULL,
    last_used  DOUBLE PRECISION
);
