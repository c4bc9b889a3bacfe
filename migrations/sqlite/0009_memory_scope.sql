-- Where a memory was made, so recall stays there by default (audiences.*.memory_scope):
-- 'slack:<channel>' (a channel, or one person's DM channel), 'discord:<channel>',
-- 'webhook:<route>'. NULL: audience-wide (the CLI and API, and memories made before this
-- migration that cannot be placed).
ALTER TABLE memories ADD COLUMN scope TEXT;

-- Existing memories: a Slack session id names its channel (slack:<channel>:<thread>), a
-- webhook session id its route (webhook:<route>:<conversation>). A Discord session id names
-- only its thread, not the channel the thread is in: those stay audience-wide.
UPDATE memories SET scope = 'slack:' || substr(session_id, 7, instr(substr(session_id, 7), ':') - 1)
WHERE session_id LIKE 'slack:%:%' AND instr(substr(session_id, 7), ':') > 1;

UPDATE memories SET scope = 'webhook:' || substr(session_id, 9, instr(substr(session_id, 9), ':') - 1)
WHERE session_id LIKE 'webhook:%:%' AND instr(substr(session_id, 9), ':') > 1;

CREATE INDEX memories_scope ON memories (audience, scope);
