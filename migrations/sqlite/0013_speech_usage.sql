-- Usage also reads what transcribing voice notes spent (SpeechTranscribed: the audio heard,
-- its cost): the spend index covers those events too.
DROP INDEX events_spend;
CREATE INDEX events_spend ON events (ts) WHERE type IN ('TurnRecorded', 'SessionCompacted', 'SpeechTranscribed');
