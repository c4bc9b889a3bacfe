-- Usage also reads what voice spent: notes transcribed (SpeechTranscribed: the audio heard,
-- its cost) and replies spoken (ReplySpoken): the spend index covers those events too.
DROP INDEX events_spend;
CREATE INDEX events_spend ON events (ts) WHERE type IN ('TurnRecorded', 'SessionCompacted', 'SpeechTranscribed', 'ReplySpoken');
