-- The outbox: chat replies recorded but not yet shown in their conversation (the
-- session's ReplyDelivered events say which were), counted beside the session so the
-- channel adapters find what they owe at start-up without replaying anything.
ALTER TABLE sessions ADD COLUMN undelivered INTEGER NOT NULL DEFAULT 0;
CREATE INDEX sessions_undelivered ON sessions (channel) WHERE undelivered > 0;
