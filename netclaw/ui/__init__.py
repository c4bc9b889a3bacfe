"""The control room: netclaw in a browser, under ``/ui`` of the control listener.

Server-rendered HTML (Jinja2 templates, autoescaped) with progressive enhancement: every
page reads and every form posts without JavaScript; with it, htmx (vendored in
``static/``, with its licence) swaps fragments, and a small script follows a session's
outputs over SSE. Logins exchange the control token for a signed HttpOnly,
SameSite=Strict cookie (:mod:`netclaw.ui._auth`); secrets never reach a page
(:mod:`netclaw.ui._redact`). Every read and action goes through the gateway.
"""

from netclaw.ui._app import control_room
from netclaw.ui._room import PREFIX as UI_PREFIX

__all__ = ["UI_PREFIX", "control_room"]
