"""The scheduler: reminders become input, each scheduled time exactly once.

One task on the I/O loop. It sleeps until the earliest ``next_fire`` in the store (no
polling), woken early when a reminder is added or removed. A due reminder is planned
(:func:`netclaw.reminders.plan_due`: on time, or missed while the daemon was down and
then ``catch_up`` decides), each fire is submitted through the gateway as an
``Inbound`` whose identity is ``reminder:<id>:<scheduled time>``, and only once the
session has made it durable does the store move ``next_fire`` on. A crash in between
fires the same scheduled time again after the restart, and the session's replay
identity admits it once.

Reminders come from the config (``schedules``, synced at start-up), the API and CLI,
and the model's tools (:class:`ReminderPort`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from netclaw.config import ScheduleConfig, Settings
from netclaw.errors import InvalidInput, JournalError, NetclawError
from netclaw.gateway import Inbound, Input, Threads, check_session_id
from netclaw.persistence import Reminder, ReminderStore
from netclaw.process.metrics import Metrics
from netclaw.process.runtime import cancel_and_wait
from netclaw.reminders import (
    CatchUp,
    Schedule,
    check_catch_up,
    check_name,
    check_text,
    fire_text,
    identity,
    iso,
    make_schedule,
    plan_due,
)
from netclaw.retry import Backoff
from netclaw.security.policy import reminders_allowed
from netclaw.security.redact import redact
from netclaw.security.roles import REMINDER_USER

log = logging.getLogger(__name__)

# A fire the gateway could not admit (or a reminder store that failed) is tried again after
# 5 s, then 10, 20, 40, and every minute while it keeps failing.
RETRY_BACKOFF = Backoff(first_s=5.0, max_s=60.0, jitter=0.0)
MAX_SLEEP_S = 3600.0  # wake at least hourly (a changed clock, a hand-edited database)


class Clock(Protocol):
    """Wall time and waiting for it, injectable so tests need not sleep."""

    def now(self) -> float: ...

    async def wait(self, until: float | None, wake: asyncio.Event) -> None:
        """Return at ``until`` (never, if None) or when ``wake`` is set, whichever is first."""
        ...


class SystemClock:
    def now(self) -> float:
        return time.time()

    async def wait(self, until: float | None, wake: asyncio.Event) -> None:
        delay = MAX_SLEEP_S if until is None else min(max(until - time.time(), 0.0), MAX_SLEEP_S)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), delay)


@dataclass(frozen=True, slots=True)
class NewReminder:
    session_id: str
    text: str
    schedule: Schedule
    created_by: str
    catch_up: CatchUp = "latest"
    name: str | None = None


class Scheduler:
    def __init__(
        self,
        store: ReminderStore,
        intake: Input,
        threads: Threads,
        settings: Callable[[], Settings],
        *,
        clock: Clock | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.store = store
        self.metrics = metrics
        self._intake = intake  # each fire, and the notices of missed ones
        self._threads = threads  # a fire delivered to a new thread (``deliver``)
        self._settings = settings
        self.clock: Clock = clock or SystemClock()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._backoff_until: float | None = None  # a fire failed: no fires before this
        self._failures = 0  # in a row: fires not admitted, or the store failing
        self.fired = 0  # fires admitted (tests, status)

    # -- people and the model -----------------------------------------------------------------

    async def add(self, new: NewReminder) -> Reminder:
        """Validate and store a reminder; it fires from now on. InvalidInput names the field.
        Everything that can fail is done before the store write, the last step: a refused
        reminder is never stored, a stored one is never answered with an error."""
        check_session_id(new.session_id)
        # Kept, then submitted as input when it fires: no secret in it either (netclaw/security/redact.py).
        text = redact(check_text(new.text)).text
        name = check_name(new.name)
        name = redact(name).text if name is not None else None
        catch_up = check_catch_up(new.catch_up)
        limit = self._settings().session.max_reminders
        if await self.store.count(new.session_id) >= limit:
            raise InvalidInput(
                "reminders", f"session {new.session_id} already has {limit} reminders (session.max_reminders)"
            )
        now = self.clock.now()
        reminder = Reminder(
            id=f"rem-{secrets.token_hex(5)}",
            session_id=new.session_id,
            text=text,
            schedule=new.schedule,
            next_fire=new.schedule.first_fire(now),
            catch_up=catch_up,
            created_by=new.created_by,
            created_at=now,
            name=name,
        )
        described = reminder.schedule.describe()
        await self.store.add(reminder)
        self._wake.set()
        log.info("reminder %s for %s: %s (%s)", reminder.id, reminder.session_id, described, new.created_by)
        return reminder

    def schedule_of(self, fields: Mapping[str, Any], *, timezone: str | None = None) -> Schedule:
        """A schedule from request fields (``at``, ``in_s``, ``every_s``, ``cron``, ``timezone``),
        any JSON values; InvalidInput names the field that is wrong."""
        given_zone = fields.get("timezone")
        return make_schedule(
            now=self.clock.now(),
            at=fields.get("at"),
            in_s=fields.get("in_s"),
            every_s=fields.get("every_s"),
            cron=fields.get("cron"),
            timezone=timezone if given_zone is None else given_zone,
        )

    async def add_for_model(self, session_id: str, audience: str, fields: Mapping[str, Any]) -> Reminder:
        """The model's ``schedule_reminder``: for its own session, if its audience may."""
        if not reminders_allowed(audience, self._settings()):  # type: ignore[arg-type]
            raise InvalidInput("reminders", f"{audience} sessions may not schedule reminders")
        catch_up = check_catch_up(fields.get("catch_up", "latest"))
        text = check_text(fields.get("text"))
        schedule = self.schedule_of(fields)
        return await self.add(NewReminder(session_id, text, schedule, f"model:{session_id}", catch_up))

    async def listing(self, session_id: str | None = None) -> list[Reminder]:
        return await self.store.listing(session_id)

    async def cancel(self, reminder_id: str, *, session_id: str | None = None) -> bool:
        """Delete a reminder (only within ``session_id`` when given: the model's own)."""
        found = await self.store.get(reminder_id)
        if found is None or (session_id is not None and found.session_id != session_id):
            return False
        deleted = await self.store.delete(reminder_id)
        self._wake.set()
        return deleted

    async def pause(self, reminder_id: str) -> bool:
        """Stop firing a reminder until :meth:`resume`; times that pass meanwhile are not
        fired afterwards. False when there is no such reminder."""
        if not await self.store.set_next_fire(reminder_id, None):
            return False
        log.info("reminder %s paused", reminder_id)
        self._wake.set()
        return True

    async def resume(self, reminder_id: str) -> Reminder | None:
        """Fire a paused reminder again from its next scheduled time after now (a one-shot
        whose time passed meanwhile fires now, as its ``catch_up`` says); None when there
        is no such reminder."""
        found = await self.store.get(reminder_id)
        if found is None:
            return None
        if not found.paused:
            return found
        next_fire = found.schedule.first_fire(self.clock.now())
        if not await self.store.set_next_fire(reminder_id, next_fire):
            return None
        log.info("reminder %s resumed: next fire %s", reminder_id, iso(next_fire))
        self._wake.set()
        return replace(found, next_fire=next_fire)

    # -- the loop -----------------------------------------------------------------------------

    async def start(self) -> None:
        await self.sync_config(self._settings().schedules)
        self._task = asyncio.get_running_loop().create_task(self._run(), name="scheduler")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def wake(self) -> None:
        self._wake.set()

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            try:
                await self.fire_due()
                earliest = await self.store.earliest()
                if self._backoff_until is None:
                    self._failures = 0
            except JournalError as exc:
                log.error("scheduler: the reminder store failed: %s; retrying", exc)
                earliest = self._retry_at(self.clock.now())
            if self._backoff_until is not None and (earliest is None or earliest < self._backoff_until):
                earliest = self._backoff_until
            await self.clock.wait(earliest, self._wake)

    def _retry_at(self, now: float) -> float:
        self._failures += 1
        return now + RETRY_BACKOFF.delay(self._failures - 1)

    async def fire_due(self) -> int:
        """Fire whatever is due now; the number of fires admitted."""
        admitted = 0
        now = self.clock.now()
        if self._backoff_until is not None:
            if now < self._backoff_until:
                return 0
            self._backoff_until = None
        for reminder in await self.store.due(now):
            admitted += await self._fire(reminder, now)
            if self._backoff_until is not None:  # that one failed: the rest wait with it
                break
        return admitted

    async def _fire(self, reminder: Reminder, now: float) -> int:
        assert reminder.next_fire is not None
        plan = plan_due(reminder.schedule, reminder.next_fire, now, reminder.catch_up)
        admitted = 0
        for scheduled in plan.fire:
            try:
                session_id = await self._session_for(reminder, scheduled)
                inbound = Inbound(
                    session_id,
                    fire_text(reminder.text, scheduled, reminder.schedule.timezone, reminder.name),
                    user=REMINDER_USER,
                    identity=identity(reminder.id, scheduled),
                )
                admission, _ = await self._intake.submit(inbound)
            except NetclawError as exc:
                # Not admitted (or not known to be): next_fire stays, the same identity comes
                # again shortly, and a duplicate is recognised by the session.
                log.warning(
                    "reminder %s: fire at %s not admitted: %s; retrying", reminder.id, iso(scheduled), exc
                )
                self._backoff_until = self._retry_at(now)
                return admitted
            self._failures = 0
            admitted += 0 if admission.duplicate else 1
            self.fired += 0 if admission.duplicate else 1
            if self.metrics is not None and not admission.duplicate:
                self.metrics.reminders_fired.inc()
            log.info("reminder %s fired for %s (due %s)", reminder.id, reminder.session_id, iso(scheduled))
        if plan.skipped:
            self._announce_missed(reminder, plan.skipped, len(plan.fire))
        await self.store.fired(reminder.id, reminder.next_fire, plan.next_fire)
        return admitted

    async def _session_for(self, reminder: Reminder, scheduled: float) -> str:
        """The reminder's session; with ``deliver``, a new thread in the target channel for
        this fire (the same thread again if a crash repeats the fire)."""
        if not reminder.deliver:
            return reminder.session_id
        key = hashlib.sha256(f"deliver|{reminder.id}|{scheduled:.3f}".encode()).hexdigest()[:20]
        header = f"⏰ {reminder.name or 'Reminder'}: {reminder.text.splitlines()[0][:200]}"
        return await self._threads.open_thread(
            reminder.deliver["channel"], reminder.deliver["to"], header, key=key, since=scheduled - 300
        )

    def _announce_missed(self, reminder: Reminder, skipped: int, fired: int) -> None:
        what = "fired once for the latest" if fired and reminder.catch_up == "latest" else "skipped"
        text = (
            f"Reminder {reminder.name or reminder.id}: {skipped} scheduled time(s) passed while netclaw was "
            f"not running; {what} (catch_up: {reminder.catch_up})."
        )
        log.info("%s: %s", reminder.session_id, text)
        with contextlib.suppress(NetclawError):
            self._intake.announce(reminder.session_id, text, "reminder")

    # -- config ---------------------------------------------------------------------------------

    async def sync_config(self, schedules: Mapping[str, ScheduleConfig]) -> None:
        """Make the store hold exactly the config's reminders (``config:<name>``), keeping the
        next fire of those whose schedule did not change (so missed fires are still seen)."""
        now = self.clock.now()
        kept: list[str] = []
        for name, config in schedules.items():
            rid = f"config:{name}"
            deliver = config.deliver.model_dump() if config.deliver is not None else None
            # With `deliver`, every fire opens its own thread there (that thread is the session).
            session_id = f"deliver:{deliver['channel']}:{deliver['to']}" if deliver else str(config.session)
            schedule = make_schedule(
                now=now,
                at=config.at,
                every_s=config.every_s,
                cron=config.cron,
                timezone=config.timezone,
                new=False,
            )
            existing = await self.store.get(rid)
            unchanged = (
                existing is not None and existing.schedule == schedule and existing.session_id == session_id
            )
            kept_fire = existing.next_fire if unchanged and existing is not None else None
            paused = unchanged and existing is not None and existing.paused  # stays paused
            next_fire = None if paused else kept_fire if kept_fire is not None else schedule.first_fire(now)
            if schedule.kind == "at" and not unchanged and next_fire is not None and next_fire <= now:
                log.info("schedule %s: its time %s has passed; not firing it", name, iso(next_fire))
                continue
            reminder = Reminder(
                id=rid,
                session_id=session_id,
                text=config.text,
                schedule=schedule,
                next_fire=next_fire,
                catch_up=config.catch_up,
                created_by=rid,
                created_at=existing.created_at if existing is not None else now,
                name=name,
                deliver=deliver,
                fired=existing.fired if existing is not None and unchanged else 0,
            )
            if existing is None or existing != reminder:
                await self.store.upsert(replace(reminder))
            kept.append(rid)
        removed = await self.store.delete_where("config:", kept)
        if removed:
            log.info("scheduler: %d reminder(s) removed from the config were deleted", removed)
        self._wake.set()
