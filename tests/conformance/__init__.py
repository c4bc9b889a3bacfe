"""The channel conformance kit: the same cases run on every channel, each against its own
fake platform, through a driver (``driver.py``: what a driver offers; ``drivers/``: one
module per channel, found by themselves).

- ``test_conversations``: an event delivered twice is answered once; a conversation is one
  session and a reply continues it; ``/stop`` and ``/status``.
- ``test_rendering``: streaming by edits within the platform's pace, ending as one
  message; a long reply split at the platform's limit, code blocks fenced in every part.
- ``test_people``: a role forbidding a tool to one speaker and not another; an approval
  decided with the platform's control; files both ways.
- ``test_restarts`` (slow: the daemon as a subprocess): a SIGKILL mid-turn answered once
  after the restart; an approval pending at a SIGKILL decided afterwards.

A case a platform cannot do (no edits, no files, no chat commands: its ``Capabilities``)
is skipped with the reason. ``rig.py`` runs the daemon (in this process, or as a child
process) and ``model.py`` the model every case talks to.
"""
