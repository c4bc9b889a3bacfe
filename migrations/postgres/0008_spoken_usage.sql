-- Usage also reads what spoken replies cost (ReplySpoken): the spend index covers them too.
DROP INDEX events_spend;
CREATE INDEX events_spend ON events (ts) WHERE type IN ('TurnRecorded', 'SessionCompacted', 'SpeechTranscribed', 'ReplySpoken');
