"""Reading and writing mail for the email channel (adapters/email/_mail.py, pure): the loop
guard's header checks, threads, the new text of a reply, approval codes, and replies
threaded as clients expect."""

from __future__ import annotations

import re

import pytest

from adapters.email._config import EmailConfig
from adapters.email._mail import (
    MAX_REFERENCES,
    approval_code,
    bot_message_id,
    compose,
    decision_in,
    new_text,
    parse,
    references_for,
    reply_subject,
    session_id_for,
    thread_token,
    token_in_bot_id,
    token_of,
    unverified_sender,
)

BOT = "netclaw@example.org"


def raw(headers: str, body: str = "hello") -> bytes:
    base = "From: Alice <Alice@Example.org>\r\nTo: netclaw@example.org\r\nSubject: hi\r\nMessage-ID: <m1@example.org>\r\n"
    return (base + headers + "\r\n" + body + "\r\n").encode()


@pytest.mark.parametrize(
    ("headers", "why"),
    [
        ("Auto-Submitted: auto-replied\r\n", "Auto-Submitted"),
        ("Auto-Submitted: auto-generated; owner-email=x@example.org\r\n", "Auto-Submitted"),
        ("X-Autoreply: yes\r\n", "auto-reply"),
        ("X-Autorespond: vacation\r\n", "auto-reply"),
        ("Precedence: bulk\r\n", "Precedence"),
        ("Precedence: junk\r\n", "Precedence"),
        ("Precedence: list\r\n", "Precedence"),
        ("List-Id: <team.lists.example.org>\r\n", "mailing list"),
        ("List-Unsubscribe: <mailto:leave@example.org>\r\n", "mailing list"),
        ("Return-Path: <>\r\n", "bounce"),
        (
            'MIME-Version: 1.0\r\nContent-Type: multipart/report; report-type="delivery-status"; boundary="b"\r\n',
            "delivery report",
        ),
    ],
)
def test_automatic_mail_is_named_with_why(headers: str, why: str) -> None:
    body = "--b\r\nContent-Type: text/plain\r\n\r\nfailed\r\n--b--" if "multipart" in headers else "hello"
    assert why in parse(raw(headers, body), BOT).automatic


def test_bounces_from_the_mail_system_and_the_bots_own_mail_are_automatic() -> None:
    for sender in ("MAILER-DAEMON@example.org", "postmaster@example.org", "NetClaw@Example.org"):
        data = f"From: {sender}\r\nTo: {BOT}\r\nMessage-ID: <b@x>\r\n\r\nx\r\n".encode()
        assert parse(data, BOT).automatic, sender
    assert "no sender" in parse(b"To: netclaw@example.org\r\n\r\nwho?\r\n", BOT).automatic


def test_a_persons_mail_is_not_automatic_and_auto_submitted_no_is_a_person() -> None:
    assert parse(raw(""), BOT).automatic == ""
    assert parse(raw("Auto-Submitted: no\r\n"), BOT).automatic == ""


def test_parse_reads_the_sender_the_thread_and_the_new_text() -> None:
    data = raw(
        "Cc: bob@example.org, netclaw@example.org\r\nIn-Reply-To: <b2@example.org>\r\n"
        "References: <root@example.org> <b1@example.org>\r\n",
        "Yes, do it.\r\n\r\nOn Monday, netclaw wrote:\r\n> May I?\r\n> More\r\n",
    )
    mail = parse(data, BOT)
    assert mail.sender == "alice@example.org" and mail.sender_name == "Alice"
    assert mail.reply_to == ("alice@example.org",) and mail.others == ("bob@example.org",)
    assert mail.root == "<root@example.org>"
    assert mail.parents == ("<b2@example.org>", "<b1@example.org>", "<root@example.org>")
    assert mail.text == "Yes, do it."


def test_a_mail_without_message_id_is_named_by_its_bytes() -> None:
    data = b"From: alice@example.org\r\nTo: netclaw@example.org\r\n\r\nno id\r\n"
    first, again = parse(data, BOT), parse(data, BOT)
    assert first.message_id == again.message_id and first.message_id.startswith("<")
    assert first.root == first.message_id


def test_new_text_drops_quotes_and_the_signature() -> None:
    assert new_text("hi\n> quoted\nthere\n-- \nAlice\nPhone") == "hi\nthere"
    assert new_text("top\n\n-----Original Message-----\nFrom: x") == "top"


def test_a_decision_is_the_first_line_that_says_anything() -> None:
    code = approval_code("ap_123")
    assert len(code) == 8 and re.fullmatch(r"[A-Z2-7]{8}", code) and approval_code("ap_123") == code
    assert decision_in(f"\n  Approve {code.lower()}\nthanks") == ("approve", code)
    assert decision_in(f"deny {code}") == ("deny", code)
    assert decision_in(f"always {code}!") == ("always", code)
    assert decision_in(f"hello\napprove {code}") is None
    assert decision_in("approve it please") is None


def test_threads_sessions_and_the_bots_message_ids_go_both_ways() -> None:
    token = thread_token("<root@example.org>")
    assert re.fullmatch(r"[0-9a-f]{16}", token)
    assert token_of(session_id_for(token)) == token and token_of("email:nope") is None
    mid = bot_message_id(token, "ab12cd", "example.org")
    assert token_in_bot_id(mid, "example.org") == token
    assert token_in_bot_id(mid, "elsewhere.org") is None  # someone else's "nc." ids are not ours


def test_a_reply_is_threaded_and_marked_as_a_robots() -> None:
    references = references_for(["<root@x>", "<b1@x>"], "<p@x>")
    mail = compose(
        sender=BOT,
        sender_name="netclaw",
        to=["alice@example.org"],
        cc=["bob@example.org"],
        subject=reply_subject("Plans"),
        text="Grüße — done",
        message_id="<nc.0123456789abcdef.k1@example.org>",
        in_reply_to="<p@x>",
        references=references,
    )
    assert mail["In-Reply-To"] == "<p@x>" and mail["References"] == "<root@x> <b1@x> <p@x>"
    assert mail["Subject"] == "Re: Plans" and mail["Auto-Submitted"] == "auto-replied"
    back = parse(mail.as_bytes(), "someone@example.org")
    assert back.text == "Grüße — done" and back.automatic.startswith("Auto-Submitted")


def test_subjects_and_long_reference_chains() -> None:
    assert reply_subject("Re: Plans") == "Re: Plans" and reply_subject("AW: x") == "AW: x"
    assert reply_subject("") == "Re: (no subject)"
    chain = references_for([f"<r{i}@x>" for i in range(50)], "<p@x>")
    assert len(chain) == MAX_REFERENCES and chain[0] == "<r0@x>" and chain[-1] == "<p@x>"


def test_the_section_refuses_a_bad_address_and_an_incomplete_enabled_channel() -> None:
    with pytest.raises(ValueError, match="not an email address"):
        EmailConfig(address="netclaw")
    with pytest.raises(ValueError, match="imap_host, smtp_host not set"):
        EmailConfig(enabled=True, address=BOT)
    with pytest.raises(ValueError, match="one line"):
        EmailConfig(name="netclaw\nBcc: x@example.org")
    section = EmailConfig(users=[" Alice@Example.org "])
    assert section.users == ["alice@example.org"] and section.allow_dms


def test_a_sender_is_verified_by_the_receiving_servers_newest_authentication_results() -> None:
    passed = (
        "Authentication-Results: mx.example.org; dkim=pass; spf=pass; dmarc=pass header.from=example.org\r\n"
    )
    forged_below = "Authentication-Results: mx.example.org; dmarc=pass\r\n"
    mail = parse(raw(passed), BOT)
    assert unverified_sender(mail, None) == ""  # not asked for: From as delivered
    assert unverified_sender(mail, "MX.example.org") == ""
    assert "did not pass DMARC" in unverified_sender(
        parse(raw(passed.replace("dmarc=pass", "dmarc=fail")), BOT), "mx.example.org"
    )
    assert "no Authentication-Results" in unverified_sender(parse(raw(""), BOT), "mx.example.org")
    # A sender's own header sits below the one the receiving server adds on top.
    top = "Authentication-Results: mx.example.org; dmarc=fail\r\n"
    assert "did not pass" in unverified_sender(parse(raw(top + forged_below), BOT), "mx.example.org")
    other = "Authentication-Results: evil.example; dmarc=pass\r\n"
    assert "not 'mx.example.org'" in unverified_sender(parse(raw(other), BOT), "mx.example.org")


def test_an_html_only_mail_is_read_as_text() -> None:
    data = raw("MIME-Version: 1.0\r\nContent-Type: text/html\r\n", "<p>Fish &amp; chips</p><br>please")
    assert parse(data, BOT).text == "Fish & chips\n\nplease"


def test_headers_that_would_break_a_reply_are_made_safe() -> None:
    data = (
        b'From: =?utf-8?q?Mal=0Alory?= <alice@example.org>\r\nTo: netclaw@example.org, "x" <bad address@x>\r\n'
        b"Subject: =?utf-8?q?two=0D=0ABcc:_victim@example.org?=\r\nMessage-ID: <s@x>\r\n\r\nhi\r\n"
    )
    mail = parse(data, BOT)
    assert mail.subject == "two Bcc: victim@example.org" and mail.sender_name == "Mal lory"
    assert mail.others == ()  # "bad address@x" is no address
    reply = compose(
        sender=BOT,
        sender_name="netclaw",
        to=mail.reply_to,
        subject=reply_subject(mail.subject),
        text="ok",
        message_id="<nc.0123456789abcdef.k@example.org>",
        in_reply_to=mail.message_id,
        references=[mail.message_id],
    )
    assert reply["Bcc"] is None and reply["Subject"] == "Re: two Bcc: victim@example.org"
