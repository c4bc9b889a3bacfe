-- Who may do what: the audit trail's own records (what happens outside sessions; the rest
-- is derived from the journal) and named API tokens, stored as SHA-256 hashes.
CREATE TABLE audit (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    at         REAL    NOT NULL,
    kind       TEXT    NOT NULL,
    actor      TEXT    NOT NULL,
    session_id TEXT,
    detail     TEXT    NOT NULL,  -- JSON
    key        TEXT    UNIQUE     -- an entry copied from a journal before it was erased
);
CREATE INDEX audit_at ON audit (at);

CREATE TABLE api_tokens (
    name       TEXT PRIMARY KEY,
    role       TEXT NOT NULL,
    hash       TEXT NOT NULL UNIQUE,  -- hex SHA-256 of the token (256 random bits: no KDF needed)
    created_at REAL NOT NULL,
    last_used  REAL
) WITHOUT ROWID;
