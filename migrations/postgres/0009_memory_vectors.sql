-- Memory by meaning: each memory's embedding (float32, unit length, little-endian bytes,
-- scored on the node: the same code as on SQLite, pgvector not needed) and its model.
ALTER TABLE memories ADD COLUMN vector BYTEA;
ALTER TABLE memories ADD COLUMN vector_model TEXT;

-- A changed fact supersedes the old memory, kept but no longer recalled.
ALTER TABLE memories ADD COLUMN superseded_by BIGINT;
ALTER TABLE memories ADD COLUMN superseded_at DOUBLE PRECISION;
ALTER TABLE memories ADD COLUMN confirmed DOUBLE PRECISION;

CREATE INDEX memories_superseded_by ON memories (superseded_by);
