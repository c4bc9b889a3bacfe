-- Memory by meaning: each memory's embedding (float32, unit length, little-endian) and the
-- model that made it (a change of model re-embeds in the background; NULL: not yet).
ALTER TABLE memories ADD COLUMN vector BLOB;
ALTER TABLE memories ADD COLUMN vector_model TEXT;

-- Memories that update: a changed fact supersedes the old memory, which is kept (with its
-- own provenance) but no longer recalled; `superseded_by` names the memory that replaced
-- it, whose session_id and turn say where the change was told.
ALTER TABLE memories ADD COLUMN superseded_by INTEGER;
ALTER TABLE memories ADD COLUMN superseded_at REAL;
-- When the same fact was last told again (a duplicate not stored twice).
ALTER TABLE memories ADD COLUMN confirmed REAL;

CREATE INDEX memories_superseded_by ON memories (superseded_by);
