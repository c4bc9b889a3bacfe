-- Sessions that were active when the daemon stopped gracefully: they recover proactively
-- at the next start (before channels deliver), and learn when they were stopped. The
-- start-up takes (reads and clears) it, so a crash leaves none behind.
CREATE TABLE warm_manifest (
    session_id TEXT PRIMARY KEY,
    stopped_at REAL NOT NULL
) WITHOUT ROWID;
