"""The control room: the sessions page with many sessions, and how far a live transcript
trails the journal.

The real ``Daemon`` in-process (temporary data_dir) against the scripted provider in its own
process. ``--sessions`` sessions (10,000) are created one answered message each, through the
gateway. Then:

- **the sessions page**: ``GET /ui/sessions`` with the login cookie, ``--rounds`` times after
  one warm-up, timed from the request to the last byte on loopback (the server's time: the
  journal's listing, today's usage per session, the status of the page's resident sessions,
  the template); also a search and the last page (info). With Chromium, the browser's
  first contentful paint of the same page (info).
- **the live transcript**: one session's page open in Chromium (Debian's package, driven by
  Playwright) while ``--turns`` turns run one after another; for each turn, the time its
  reply appeared in the page (a MutationObserver on the live part) minus the time its
  ``TurnRecorded`` event was written to the journal. Without Chromium the same stream is
  read by an SSE client instead (said so on the line).

| figure | target |
| --- | --- |
| ``ui_sessions_page_ms`` (median server time, 10,000 sessions) | <= 300 ms |
| ``ui_transcript_lag_p99_ms`` (reply in the page after its journal write) | <= 100 ms |

Run from the repo root: ``python bench/ui.py`` (~2 min: creating the sessions dominates) or
``python bench/ui.py --quick`` (1,000 sessions, 20 turns: seconds; the targets are for the
full run).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time

import _common as c
import httpx
from _common import daemon_settings, figure, info, log, machine_load, median, percentile
from _provider import ProviderProcess

from netclaw.daemon import Daemon
from netclaw.gateway import Inbound
from netclaw.security.control_token import read_control_token
from tests.browser._room import chromium_missing, launch

OBSERVER = """() => {
  window.__replies = {};
  const live = document.getElementById('live');
  new MutationObserver(() => {
    for (const node of live.querySelectorAll('.live-text.done')) {
      const turn = node.dataset.turn;
      if (turn && !(turn in window.__replies)) window.__replies[turn] = Date.now();
    }
  }).observe(live, {subtree: true, childList: true, attributes: true, attributeFilter: ['class']});
}"""


async def create_sessions(daemon: Daemon, sessions: int, concurrency: int) -> int:
    gateway = daemon.gateway
    assert gateway is not None
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(sessions):
        queue.put_nowait(i)
    failed = 0

    async def worker() -> None:
        nonlocal failed
        while True:
            try:
                i = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            _, outcome = await gateway.intake.submit(
                Inbound(f"cli:ui-{i:05d}", f"hello number {i}"), wait=True
            )
            failed += outcome is None or outcome.status != "completed"

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return failed


def log_in(base_url: str, token: str) -> httpx.Client:
    client = httpx.Client(base_url=base_url, timeout=60)
    answer = client.post("/ui/login", data={"token": token})
    if answer.status_code != 303:
        raise RuntimeError(f"login failed: {answer.status_code} {answer.text[:200]}")
    return client


def time_page(client: httpx.Client, path: str, rounds: int) -> list[float]:
    client.get(path).raise_for_status()  # warm-up
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        answer = client.get(path)
        times.append((time.perf_counter() - t0) * 1000)
        answer.raise_for_status()
    return times


def turn_times(daemon: Daemon, sid: str) -> dict[int, float]:
    """When each turn's TurnRecorded event was written, by turn number."""
    assert daemon.io is not None and daemon.journal is not None
    events = daemon.io.run(daemon.journal.replay(sid))
    return {json.loads(e.payload)["turn"]: e.ts for e in events if e.type == "TurnRecorded"}


def lag_in_browser(daemon: Daemon, token: str, sid: str, turns: int) -> tuple[list[float], float | None]:
    """(lags in ms, first contentful paint of the sessions page in ms)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = launch(playwright)
        try:
            context = browser.new_context(base_url=daemon.base_url)
            page = context.new_page()
            page.goto("/ui/login")
            page.get_by_label("Control token").fill(token)
            page.get_by_role("button", name="Log in").click()
            page.wait_for_url("**/ui/sessions")
            paint = page.evaluate(
                "() => (performance.getEntriesByName('first-contentful-paint')[0] || {}).startTime || null"
            )
            page.goto(f"/ui/sessions/{sid}")
            page.wait_for_selector("#recorded article.assistant")
            page.evaluate(OBSERVER)
            page.wait_for_timeout(300)  # the live stream has joined
            api = httpx.Client(
                base_url=daemon.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60
            )
            for i in range(turns):
                api.post(f"/api/sessions/{sid}/messages", params={"wait": 1}, json={"text": f"turn {i}"})
            page.wait_for_function(f"() => Object.keys(window.__replies).length >= {turns}", timeout=60_000)
            shown: dict[str, float] = page.evaluate("() => window.__replies")
            api.close()
        finally:
            browser.close()
    written = turn_times(daemon, sid)
    lags = [ms - written[int(turn)] * 1000 for turn, ms in shown.items() if int(turn) in written]
    return lags, paint


def lag_over_sse(daemon: Daemon, client: httpx.Client, token: str, sid: str, turns: int) -> list[float]:
    shown: dict[int, float] = {}
    api = httpx.Client(base_url=daemon.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
    with client.stream("GET", f"/ui/sessions/{sid}/events") as stream:
        lines = stream.iter_lines()
        next(lines)
        for i in range(turns):
            api.post(f"/api/sessions/{sid}/messages", json={"text": f"turn {i}"})
            event = ""
            for line in lines:
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: ") and event == "text":
                    shown[json.loads(line[6:])["turn"]] = time.time() * 1000
                    break
    api.close()
    written = turn_times(daemon, sid)
    return [ms - written[turn] * 1000 for turn, ms in shown.items() if turn in written]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000 sessions and 20 turns (seconds)")
    parser.add_argument("--sessions", type=int, default=None)
    parser.add_argument("--turns", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--dir", default=None, help="where the temporary data_dir goes")
    args = parser.parse_args()
    sessions = args.sessions or (1000 if args.quick else 10_000)
    turns = args.turns or (20 if args.quick else 200)
    load_before = machine_load()

    with c.temp_dir("netclaw-bench-ui-", args.dir) as tmp:
        provider = ProviderProcess(tmp / "provider.log").start()
        daemon: Daemon | None = None
        try:
            settings = daemon_settings(
                tmp / "data", provider.base_url, session={"max_resident_sessions": 1000}
            )
            daemon = Daemon(settings)
            daemon.start()
            assert daemon.io is not None
            t0 = time.perf_counter()
            failed = daemon.io.run(create_sessions(daemon, sessions, args.concurrency), 3600)
            log(f"{sessions} sessions answered in {time.perf_counter() - t0:.1f} s ({failed} failed)")
            token = read_control_token(daemon.settings)
            assert token is not None
            client = log_in(daemon.base_url, token)
            page = client.get("/ui/sessions").text
            shown = re.search(r"(\d+) sessions?", page)
            assert shown is not None and int(shown.group(1)) == sessions, "the page counts every session"
            times = time_page(client, "/ui/sessions", args.rounds)
            search = time_page(client, "/ui/sessions?q=ui-0042", max(5, args.rounds // 4))
            last = time_page(client, f"/ui/sessions?page={(sessions + 49) // 50}", max(5, args.rounds // 4))
            page_ms = median(times)
            label = f"{sessions} sessions" + ("" if sessions == 10_000 else "; the target is for 10,000")
            figure("ui_sessions_page_ms", page_ms, "ms", "<= 300", page_ms <= 300)
            info("ui_sessions_page_p95_ms", percentile(times, 95), "ms", label)
            info("ui_sessions_search_ms", median(search), "ms", "?q=, median")
            info("ui_sessions_last_page_ms", median(last), "ms", "the last page, median")

            sid = "cli:ui-00000"
            missing = chromium_missing()
            if missing is None:
                lags, paint = lag_in_browser(daemon, token, sid, turns)
                how = f"Chromium, {len(lags)} turns"
                if paint is not None:
                    info("ui_sessions_first_paint_ms", paint, "ms", "the browser's first contentful paint")
            else:
                lags = lag_over_sse(daemon, client, token, sid, turns)
                how = f"an SSE client, not a browser ({missing}), {len(lags)} turns"
            p99 = percentile(lags, 99)
            figure("ui_transcript_lag_p99_ms", p99, "ms", "<= 100", p99 <= 100)
            info("ui_transcript_lag_median_ms", median(lags), "ms", how)
            client.close()
        finally:
            if daemon is not None:
                daemon.stop()
            provider.stop()
    info("machine_load", f"{load_before} -> {machine_load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
