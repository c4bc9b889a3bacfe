"""Slack's message text format: the model's Markdown as mrkdwn, with Slack's three control
characters escaped.

The model writes CommonMark-ish Markdown; Slack's ``text`` field speaks mrkdwn, which
differs where it matters: ``*bold*`` (not ``**``), ``_italic_``, ``~strike~``,
``<url|label>`` links, no headings, no ``-`` bullets. :func:`to_mrkdwn` converts line by
line, one pass per line, and leaves code alone:

- fenced blocks keep their content verbatim (only escaped) and lose the language tag,
  which Slack would print as code;
- inline code spans are kept as they are (escaped);
- everything else: ``&``, ``<`` and ``>`` are escaped first, so the model can neither ping
  ``@channel`` nor forge a link; the only ``<…>`` that reach Slack are the links made
  here from ``[label](http…)``, whose label cannot close them.

Splitting (``adapters.chat._text.split_message``) runs before this, per piece, and keeps
code fences balanced in every piece.
"""

from __future__ import annotations

import re

FENCE = "```"

_INLINE_CODE = re.compile(r"(`+)(.+?)\1")
_LINK = re.compile(r"\[([^\]\n]+)\]\(((?:https?://|mailto:)[^\s)]+)\)")
_BOLD = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1")
_ITALIC_STAR = re.compile(r"(?<![\w*])\*(?=[^\s*])([^*\n]+?)(?<=\S)\*(?![\w*])")
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.+?)\s*#*\s*$")
_BULLET = re.compile(r"^(\s*)[-*+]\s+(?=\S)")
_RULE = re.compile(r"^ {0,3}([-*_])(\s*\1){2,}\s*$")
_BOLD_MARK = "\x00B\x00"  # a bold marker while italics are converted (NUL never reaches Slack)


def slack_escape(text: str) -> str:
    """Text as Slack must receive it: ``&``, ``<`` and ``>`` escaped (so nobody can ping
    ``@channel`` or forge links)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def no_pings(markdown: str) -> str:
    """Markdown for Slack's streaming methods, which render it themselves: Slack's own
    ``<!channel>`` / ``<@U…>`` / ``<#C…>`` syntax is broken with a zero-width space, so
    the model cannot ping anyone there either."""
    return re.sub(r"<([!@#])", "<\u200b\\1", markdown)


def slack_unescape(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def to_mrkdwn(markdown: str) -> str:
    """The model's Markdown as Slack mrkdwn (see the module docstring)."""
    out: list[str] = []
    in_fence = False
    for line in markdown.split("\n"):
        stripped = line.strip()
        if stripped.startswith(FENCE):
            # An opening fence loses its language tag; a closing one stays as it is.
            out.append(FENCE if not in_fence else slack_escape(line))
            in_fence = not in_fence
            continue
        out.append(slack_escape(line) if in_fence else _line(line))
    return "\n".join(out)


def _line(line: str) -> str:
    if _RULE.match(line):
        return "──────────"
    heading = _HEADING.match(line)
    if heading is not None:
        return f"*{_spans(heading.group(1), in_bold=True)}*"
    bullet = _BULLET.match(line)
    if bullet is not None:
        return f"{bullet.group(1)}• {_spans(line[bullet.end() :])}"
    if line.startswith(">"):  # a quote: Slack's own syntax, kept unescaped at the line start
        return ">" + _spans(line[1:])
    return _spans(line)


def _spans(text: str, *, in_bold: bool = False) -> str:
    """Inline formatting outside code spans."""
    parts: list[str] = []
    at = 0
    for code in _INLINE_CODE.finditer(text):
        parts.append(_format(text[at : code.start()], in_bold))
        parts.append(slack_escape(code.group(0)))
        at = code.end()
    parts.append(_format(text[at:], in_bold))
    return "".join(parts)


def _format(text: str, in_bold: bool) -> str:
    if not text:
        return text
    links: list[str] = []

    def keep_link(match: re.Match[str]) -> str:
        label = slack_escape(match.group(1)).replace("|", "¦")
        links.append(f"<{slack_escape(match.group(2))}|{label}>")
        return f"\x00L{len(links) - 1}\x00"

    text = _LINK.sub(keep_link, text)
    text = slack_escape(text)
    text = _BOLD.sub(lambda m: m.group(2) if in_bold else f"{_BOLD_MARK}{m.group(2)}{_BOLD_MARK}", text)
    text = _ITALIC_STAR.sub(r"_\1_", text)
    text = _STRIKE.sub(r"~\1~", text)
    text = text.replace(_BOLD_MARK, "*")
    return re.sub("\x00L(\\d+)\x00", lambda m: links[int(m.group(1))], text)
