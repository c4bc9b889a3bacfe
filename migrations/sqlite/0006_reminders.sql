-- Reminders: scheduled input for a session. A fire admits a message whose replay identity
-- is reminder:<id>:<scheduled time>, then moves next_fire on; a crash between the two
-- fires the same scheduled time again, which the session's identity check turns into
-- nothing. next_fire NULL: done (one-shot reminders are deleted once fired).
CREATE TABLE reminders (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    text TEXT NOT NULL,
    schedule TEXT NOT NULL,          -- JSON: kind, at | every_s | cron, timezone
    next_fire REAL,
    catch_up TEXT NOT NULL DEFAULT 'latest',
    created_by TEXT NOT NULL,        -- config:<name>, api, cli, model:<session id>
    name TEXT,
    deliver TEXT,                    -- JSON {"channel", "to"} or NULL
    created_at REAL NOT NULL,
    fired INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX reminders_due ON reminders (next_fire) WHERE next_fire IS NOT NULL;
CREATE INDEX reminders_session ON reminders (session_id);
