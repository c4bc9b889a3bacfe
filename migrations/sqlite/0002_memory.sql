-- Durable memory: facts, decisions, action items and preferences flushed at
-- compaction or saved with the `remember` tool, recalled into later turns.
CREATE TABLE memories (
    id          INTEGER PRIMARY KEY,  -- the FTS rowid
    text        TEXT    NOT NULL,
    kind        TEXT    NOT NULL
                CHECK (kind IN ('fact', 'decision', 'action_item', 'preference', 'note')),
    session_id  TEXT    NOT NULL,     -- where it was learnt
    audience    TEXT    NOT NULL,     -- personal / team / public: recall never crosses audiences
    created     REAL    NOT NULL,     -- unix seconds
    norm        TEXT    NOT NULL      -- casefolded, whitespace-collapsed, trailing punctuation stripped
);

-- The same fact is stored once per audience, however it was capitalised or punctuated.
CREATE UNIQUE INDEX memories_audience_norm ON memories (audience, norm);

-- External content: the text lives once, in `memories`; the index follows it via triggers.
CREATE VIRTUAL TABLE memories_fts USING fts5 (
    text,
    content = 'memories',
    content_rowid = 'id',
    tokenize = 'porter unicode61'
);

CREATE TRIGGER memories_fts_insert AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts (rowid, text) VALUES (new.id, new.text);
END;

CREATE TRIGGER memories_fts_delete AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, text) VALUES ('delete', old.id, old.text);
END;

-- Nothing updates text today; without this an edit would leave the index stale.
CREATE TRIGGER memories_fts_update AFTER UPDATE OF text ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, text) VALUES ('delete', old.id, old.text);
    INSERT INTO memories_fts (rowid, text) VALUES (new.id, new.text);
END;
