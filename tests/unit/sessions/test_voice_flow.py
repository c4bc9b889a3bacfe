"""Voice notes through the pure session: an audio attachment is admitted like any file,
heard by speech-to-text before the model is called (``Transcribe`` → ``Transcribed``), and
what was heard is recorded (``SpeechTranscribed``) as part of the message — so a session
recovered after it never asks again, one recovered before it asks once; a note that cannot
be heard is recorded with why and people get a notice; the model reads the transcript
marked as transcribed speech."""

from __future__ import annotations

from netclaw import outputs as out
from netclaw.messages import Attachment, Transcript, model_text
from netclaw.sessions._core.commands import SendUserMessage, SetVoice
from netclaw.sessions._core.effects import CallModel, Charge, Measure, Recall, Speak, Transcribe
from netclaw.sessions._core.journal import snapshot as snapshots
from netclaw.sessions._core.journal.codec import decode, encode
from netclaw.sessions._core.journal.events import ReplySpoken, SpeechTranscribed, VoiceRepliesSet
from netclaw.sessions._core.journal.state import SessionState
from netclaw.sessions._core.results import Spoken, Transcribed
from netclaw.sessions._core.status import VoiceChoice
from tests.unit.sessions.harness import Driver

NOTE = Attachment("voice.ogg", "audio/ogg", "/nonexistent/voice.ogg", 4096, "audio")
PICTURE = Attachment("cat.png", "image/png", "/nonexistent/cat.png", 100, "image")
SPEECH = {
    "providers": {"stt": {"type": "openai", "base_url": "http://127.0.0.1:9/v1"}},
    "speech": {"transcription": {"provider": "stt", "model": "whisper-1", "price_per_minute": 0.006}},
}


def model_reads(d: Driver) -> str:
    """The voice note's message as the model is sent it (its text, files rendered)."""
    (message,) = [m for m in d.pending(CallModel).request.messages if m.files]
    return model_text(message)


def send_note(d: Driver, text: str = "", files: tuple[Attachment, ...] = (NOTE,)) -> None:
    d.handle(SendUserMessage(text, d.now, d.reply(), identity="voice-1", files=files))


def test_a_voice_note_is_heard_before_the_model_is_called_and_the_model_reads_it_marked() -> None:
    d = Driver(**SPEECH)
    send_note(d)
    transcribe = d.pending(Transcribe)
    assert transcribe.files == ((0, NOTE),)
    assert not [e for e in d.effects if isinstance(e, CallModel)]  # the model waits for the transcript
    effects = d.handle(
        Transcribed(transcribe.op_id, ((0, Transcript("buy milk", "english", 30.0, None, "whisper-1")),))
    )
    (event,) = [e for e in d.events(effects) if isinstance(e, SpeechTranscribed)]
    assert event.transcripts[0][1].text == "buy milk" and event.spent == {"speech_ms": 30_000}
    assert event.cost == 0.003  # half a minute at 0.006 a minute
    assert any(isinstance(e, Charge) and e.cost == 0.003 for e in effects)
    assert Measure("speech_audio_seconds", 30.0, "transcription") in effects
    # Recorded as part of the message: the state's message carries the transcript.
    (message,) = [m for m in d.state.transcript if m.files]
    assert message.files[0].transcript == Transcript("buy milk", "english", 30.0, None, "whisper-1")
    assert d.state.cost_spent_on("2023-11-14") == 0.003  # the spend guards count it
    said = model_reads(d)
    assert "[transcribed speech from the attached voice note voice.ogg" in said
    assert "language: english" in said and "\nbuy milk\n" in said
    d.answer("milk noted")
    d.close()


def test_a_note_that_cannot_be_heard_is_recorded_with_why_and_people_are_told() -> None:
    d = Driver(**SPEECH)
    send_note(d, "listen to this")
    transcribe = d.pending(Transcribe)
    failed = Transcript(error="it is 900 s long; the limit is 600 s (speech.max_audio_s)", seconds=900.0)
    d.handle(Transcribed(transcribe.op_id, ((0, failed),)))
    notices = [o for o in d.outputs() if isinstance(o, out.Notice) and o.kind == "transcription_failed"]
    assert len(notices) == 1 and "voice.ogg" in notices[0].text and "600 s" in notices[0].text
    said = model_reads(d)
    assert "listen to this" in said and "could not be transcribed: it is 900 s long" in said
    assert not [e for e in d.effects if isinstance(e, Charge) and e.cost]  # nothing heard, nothing charged
    d.close()


def test_a_session_recovered_after_the_transcript_never_asks_again() -> None:
    d = Driver(**SPEECH)
    send_note(d)
    d.handle(Transcribed(d.pending(Transcribe).op_id, ((0, Transcript("hello there", "english", 2.0)),)))
    state = d.state  # as the journal has it: admitted, started, heard — the answer never came
    d.close()
    again = Driver(state=state, **SPEECH)
    assert not [e for e in again.effects if isinstance(e, Transcribe)]
    assert "hello there" in model_reads(again)
    again.close()


def test_a_session_recovered_before_the_transcript_asks_once() -> None:
    d = Driver(**SPEECH)
    send_note(d)
    state = d.state  # admitted and started; killed while the note was being heard
    d.close()
    again = Driver(state=state, **SPEECH)
    (transcribe,) = [e for e in again.effects if isinstance(e, Transcribe)]
    again.handle(Transcribed(transcribe.op_id, ((0, Transcript("hello again")),)))
    assert len([e for e in again.effects if isinstance(e, Transcribe)]) == 1
    assert "hello again" in model_reads(again)
    again.close()


def test_only_audio_files_are_heard_and_a_stale_result_is_dropped() -> None:
    d = Driver(**SPEECH)
    send_note(d, files=(PICTURE, NOTE))
    transcribe = d.pending(Transcribe)
    assert transcribe.files == ((1, NOTE),)
    assert d.handle(Transcribed(transcribe.op_id + 99, ((1, Transcript("stale")),))) == []
    d.handle(Transcribed(transcribe.op_id, ((1, Transcript("fresh")),)))
    files = next(m for m in d.state.transcript if m.files).files
    assert files[0].transcript is None and files[1].transcript == Transcript("fresh")
    d.close()


def test_the_transcript_survives_the_journal_codec() -> None:
    event = SpeechTranscribed(
        "u_1",
        ((0, Transcript("hi", "en", 1.5, None, "whisper-1")), (2, Transcript(error="too big"))),
        {"speech_ms": 1500},
        0.00015,
    )
    assert decode(*encode(event)) == event
    heard = Attachment("a.wav", "audio/wav", "/x", 10, "audio", transcript=Transcript("hi", "en", 1.5))
    assert Attachment.from_dict(heard.to_dict()) == heard


def test_a_snapshot_after_the_transcript_writes_the_changed_row_again() -> None:
    """Snapshots write each transcript row once; the transcript changes the voice note's
    row after it was saved, so the next snapshot writes that row again (rows are stored by
    index, as the stores upsert them) and the state read back still has it."""
    d = Driver(**SPEECH)
    send_note(d)
    before = d.state
    store: list[str] = []

    def save(state: SessionState, first: int) -> str:
        document, rows = snapshots.encode(state, first)
        del store[first:]
        store.extend(rows)
        return document

    save(before, 0)  # the note's row is saved without its transcript
    saved = len(store)
    effects = d.handle(Transcribed(d.pending(Transcribe).op_id, ((0, Transcript("water the plants")),)))
    changed = snapshots.first_changed_row(d.state, d.events(effects))
    assert changed is not None and changed < saved
    assert snapshots.first_changed_row(before, ()) is None
    document = save(d.state, min(saved, changed))
    (message,) = [m for m in snapshots.decode(document, store).transcript if m.files]
    assert message.files[0].transcript == Transcript("water the plants")
    d.close()


# -- spoken replies ---------------------------------------------------------------------------------

TTS = {
    "providers": {"tts": {"type": "openai", "base_url": "http://127.0.0.1:9/v1"}},
    "speech": {"synthesis": {"provider": "tts", "model": "tts-1", "price_per_million_chars": 15.0}},
}
AUDIO = Attachment("reply-1.mp3", "audio/mpeg", "/nonexistent/reply-1.mp3", 2048, "audio")


def test_voice_on_speaks_a_completed_reply_and_sends_the_audio_beside_the_text() -> None:
    d = Driver(**TTS)
    reply = d.reply()
    d.handle(SetVoice(True, "slack:U1", reply))
    (chosen,) = d.answers(reply)
    assert chosen == VoiceChoice("cli:t", on=True, chosen=True, available=True)
    assert [e for e in d.events() if isinstance(e, VoiceRepliesSet)] == [VoiceRepliesSet(True, "slack:U1")]
    d.send("say hello")
    effects = d.answer("Hello there.")
    assert Speak(1, "Hello there.") in effects
    effects = d.handle(Spoken(1, AUDIO, chars=12, model="tts-1"))
    (spoken,) = [e for e in d.events(effects) if isinstance(e, ReplySpoken)]
    assert spoken.file == AUDIO and spoken.spent == {"speech_chars": 12} and spoken.cost == 0.00018
    (file,) = [o for o in d.outputs(effects) if isinstance(o, out.File)]
    assert (file.turn, file.name, file.path) == (1, "reply-1.mp3", AUDIO.path)
    assert d.state.cost_spent_on("2023-11-14") == 0.00018
    d.close()


def test_text_to_speech_down_leaves_the_reply_as_text_with_a_notice() -> None:
    d = Driver(**TTS, audiences={"personal": {"voice_replies": True}})  # the audience's default
    d.send("say hello")
    d.answer("Hello there.")
    effects = d.handle(Spoken(1, None, error="provider 'tts': cannot reach http://127.0.0.1:9/v1"))
    assert not d.events(effects)
    (notice,) = [o for o in d.outputs(effects) if isinstance(o, out.Notice)]
    assert notice.kind == "speech_failed" and "text only: provider 'tts': cannot reach" in notice.text
    d.close()


def test_replies_are_not_spoken_when_off_or_without_an_endpoint() -> None:
    d = Driver(**TTS)  # off by default
    d.send("one")
    assert not [e for e in d.answer("first") if isinstance(e, Speak)]
    d.handle(SetVoice(True, "cli", d.reply()))
    d.handle(SetVoice(False, "cli", d.reply()))
    d.send("two")
    assert not [e for e in d.answer("second") if isinstance(e, Speak)]
    d.close()
    bare = Driver(audiences={"personal": {"voice_replies": True}})
    reply = bare.reply()
    bare.handle(SetVoice(None, "cli", reply))
    (chosen,) = bare.answers(reply)
    assert chosen.on and not chosen.available and "no text-to-speech endpoint" in chosen.text()
    bare.send("three")
    assert not [e for e in bare.answer("third") if isinstance(e, Speak)]
    bare.close()


def test_the_voice_choice_survives_the_codec_and_the_snapshot() -> None:
    for event in (VoiceRepliesSet(False, "cli"), ReplySpoken(3, AUDIO, {"speech_chars": 5}, 0.1, "tts-1")):
        assert decode(*encode(event)) == event
    d = Driver(**TTS)
    d.handle(SetVoice(True, "cli", d.reply()))
    assert snapshots.decode(*snapshots.encode(d.state, 0)).voice_replies is True
    d.close()


def test_a_secret_said_aloud_is_taken_out_of_the_transcript_before_it_is_recorded() -> None:
    d = Driver(**SPEECH)
    send_note(d)
    said = "the key is AKIAIOSFODNN7EXAMPLE, keep it"
    effects = d.handle(Transcribed(d.pending(Transcribe).op_id, ((0, Transcript(said, "english", 3.0)),)))
    (event,) = [e for e in d.events(effects) if isinstance(e, SpeechTranscribed)]
    assert event.transcripts[0][1].text == "the key is [redacted: AWS Access Key], keep it"
    assert "AKIAIOSFODNN7EXAMPLE" not in model_reads(d)
    (told,) = [o for o in d.outputs(effects) if isinstance(o, out.Notice) and o.kind == "redaction"]
    assert "AWS Access Key" in told.text
    d.close()


def test_memories_are_recalled_by_what_was_said_in_the_note() -> None:
    d = Driver(has_memory=True, **SPEECH)
    send_note(d, "and also")
    assert not [e for e in d.effects if isinstance(e, Recall)]  # heard first, then recalled
    d.handle(Transcribed(d.pending(Transcribe).op_id, ((0, Transcript("when does the password rotate?")),)))
    assert d.pending(Recall).query.query == "and also\nwhen does the password rotate?"
    d.close()


def test_an_audience_may_have_the_transcript_shown_under_the_note() -> None:
    d = Driver(**SPEECH, audiences={"personal": {"show_transcripts": True}})
    send_note(d)
    effects = d.handle(Transcribed(d.pending(Transcribe).op_id, ((0, Transcript("buy milk")),)))
    (shown,) = [o for o in d.outputs(effects) if isinstance(o, out.Notice) and o.kind == "transcript"]
    assert shown.text == "Transcribed voice.ogg: buy milk"
    d.close()
    quiet = Driver(**SPEECH)  # by default the model reads it, people are not shown it again
    send_note(quiet)
    effects = quiet.handle(Transcribed(quiet.pending(Transcribe).op_id, ((0, Transcript("buy milk")),)))
    assert not [o for o in quiet.outputs(effects) if isinstance(o, out.Notice)]
    quiet.close()
