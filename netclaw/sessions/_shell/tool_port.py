"""The session as a running tool call sees it (:class:`~netclaw.tools.ToolSession`): one per
tool round, built by the actor, used on the I/O loop.

Everything it tells the session goes to the actor as a :class:`~netclaw.sessions._core.commands.ToolEvent` for
the round's turn (an output to publish, tokens spent); the actor drops one whose turn is
over. A question waits in the daemon's :class:`~netclaw.tools.Questions` (where the
gateway answers it), bounded by ``tools.approval_timeout_s``, in memory: see
:mod:`netclaw.tools._asks` for why, and docs/architecture.md for the durable design.
Sampling asks the person first (a ``confirm`` question), then calls the session's model
with the prompt alone — no history, no tools — and counts its tokens in the turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import pykka

from netclaw import outputs as out
from netclaw.config import ModelConfig, Settings
from netclaw.llm import Provider, ProviderRequest, Usage
from netclaw.messages import ChatMessage, new_id, system
from netclaw.sessions._core.results import ToolEvent
from netclaw.sessions._shell.deps import SessionRef
from netclaw.tools import (
    Answer,
    PendingQuestion,
    Question,
    Questions,
    SampleRefused,
    SampleReply,
    SampleRequest,
    expiry,
    new_question_id,
    waiting_for_a_person,
)

log = logging.getLogger(__name__)

EXCERPT_CHARS = 600  # of a sampling prompt, in the question a person sees


class SessionToolPort:
    def __init__(
        self,
        *,
        session_id: str,
        audience: str,
        turn: int,
        actor: SessionRef,
        questions: Questions | None,
        provider: Provider,
        model: ModelConfig,
        settings: Settings,
    ) -> None:
        self.session_id = session_id
        self.audience = audience
        self.turn = turn
        self._actor = actor
        self._questions = questions
        self._provider = provider
        self._model = model
        self._settings = settings

    def _tell(self, output: out.Output | None = None, usage: Usage | None = None, waiting: int = 0) -> None:
        with contextlib.suppress(pykka.ActorDeadError):  # the session stopped: nobody to tell
            self._actor.tell(ToolEvent(self.turn, output, usage, waiting))

    def progress(
        self, call_id: str, tool: str, progress: float, total: float | None, message: str | None
    ) -> None:
        self._tell(
            out.ToolProgress(
                session_id=self.session_id,
                turn=self.turn,
                id=call_id,
                name=tool,
                progress=progress,
                total=total,
                message=message,
            )
        )

    async def ask(self, call_id: str, tool: str, question: Question) -> Answer:
        if self.audience == "public" or self._questions is None:
            log.info(
                "%s: %s asked the person something; declined (nobody may be asked here)",
                self.session_id,
                tool,
            )
            return Answer("decline", by="policy")
        asked, expires = expiry(self._settings.tools.approval_timeout_s)
        pending = PendingQuestion(
            new_question_id(),
            self.session_id,
            self.audience,
            self.turn,
            call_id,
            tool,
            question,
            asked,
            expires,
            asyncio.get_running_loop().create_future(),
        )
        self._questions.add(pending)
        log.info("%s: turn %d: %s asks the person (%s)", self.session_id, self.turn, tool, pending.id)
        self._tell(
            waiting=1,
            output=out.InputRequested(
                session_id=self.session_id,
                turn=self.turn,
                question_id=pending.id,
                tool=tool,
                kind=question.kind,
                source=question.source,
                message=question.message,
                expires_at=expires,
                schema=question.schema,
                url=question.url,
            ),
        )
        action: str = "cancel"
        by = "the turn ended"
        try:
            with waiting_for_a_person():  # the call's own deadlines stand still meanwhile
                answer = await asyncio.wait_for(
                    asyncio.shield(pending.answer), max(0.0, expires - time.time())
                )
            action, by = answer.action, answer.by
            return answer
        except TimeoutError:
            action, by = "expired", "timeout"
            return Answer("cancel", by="timeout")
        finally:
            self._questions.remove(pending.id)
            if not pending.answer.done():
                pending.answer.cancel()
            self._tell(
                waiting=-1,
                output=out.InputAnswered(
                    session_id=self.session_id,
                    question_id=pending.id,
                    action=action,  # type: ignore[arg-type]
                    by=by,
                ),
            )

    async def sample(self, call_id: str, tool: str, request: SampleRequest) -> SampleReply:
        prompt = "\n".join(text for _, text in request.messages)
        excerpt = prompt if len(prompt) <= EXCERPT_CHARS else prompt[:EXCERPT_CHARS] + "…"
        answer = await self.ask(
            call_id,
            tool,
            Question(
                "confirm",
                request.source,
                f"{request.source} asks the model to answer this (up to {request.max_tokens} tokens):\n{excerpt}",
            ),
        )
        if answer.action != "accept":
            raise SampleRefused(
                f"the request to sample was not allowed ({answer.action} by {answer.by or 'nobody'})"
            )
        model = self._model
        now = time.time()
        messages = [system(request.system_prompt)] if request.system_prompt else []
        messages += [ChatMessage(new_id(), role, text, now) for role, text in request.messages]
        completion = await self._provider.complete(
            ProviderRequest(
                model=model.model,
                messages=messages,
                max_output_tokens=min(request.max_tokens, model.max_output_tokens),
                vision=False,
            )
        )
        self._tell(None, completion.usage)  # counted, priced and charged with the turn
        log.info("%s: turn %d: sampled for %s (%s)", self.session_id, self.turn, request.source, answer.by)
        return SampleReply(completion.text, model.model, completion.finish_reason)
