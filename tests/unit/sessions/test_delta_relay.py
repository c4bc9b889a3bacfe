"""DeltaRelay: a model call's deltas reach the actor coalesced, and not at all while
nobody takes streamed text."""

from __future__ import annotations

import asyncio

from netclaw.llm import Completion, Delta, OnDelta
from netclaw.providers import ProviderRequest
from netclaw.sessions._core.results import ProviderDeltas, ProviderDone
from netclaw.sessions._shell.loop_ops import DeltaRelay


class Told:
    def __init__(self) -> None:
        self.messages: list[object] = []

    def tell(self, message: object) -> None:
        self.messages.append(message)


class ThreePieces:
    """Streams "he", "ll", "o", letting the loop run between them (as a socket read does)."""

    async def complete(self, request: ProviderRequest, on_delta: OnDelta | None = None) -> Completion:
        assert on_delta is not None
        for piece in ("he", "ll", "o"):
            on_delta(Delta("text", piece))
            # Not a wait for a condition: two loop ticks, so the relay's flush runs in between.
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        return Completion(text="hello")


REQUEST = ProviderRequest(model="m", messages=())


def streamed(done: ProviderDone, told: Told) -> str:
    batches = [m.deltas for m in told.messages if isinstance(m, ProviderDeltas)]
    return "".join(d.text for batch in [*batches, done.deltas] for d in batch)


async def test_deltas_reach_the_actor_while_someone_streams() -> None:
    told = Told()
    done = await DeltaRelay(told, 7, wanted=lambda: True).stream(ThreePieces(), REQUEST)  # type: ignore[arg-type]
    assert streamed(done, told) == "hello"
    assert told.messages and all(isinstance(m, ProviderDeltas) and m.op_id == 7 for m in told.messages)
    assert done.completion.text == "hello"


async def test_no_delta_travels_while_nobody_streams_and_the_answer_still_does() -> None:
    told = Told()
    done = await DeltaRelay(told, 7, wanted=lambda: False).stream(ThreePieces(), REQUEST)  # type: ignore[arg-type]
    assert told.messages == []
    assert done.deltas == ()
    assert done.completion.text == "hello"


async def test_a_subscriber_that_comes_mid_stream_gets_what_follows() -> None:
    told, watching = Told(), [False]

    class Watched(ThreePieces):
        async def complete(self, request: ProviderRequest, on_delta: OnDelta | None = None) -> Completion:
            assert on_delta is not None

            def relay(delta: Delta) -> None:
                if delta.text == "ll":
                    watching[0] = True  # someone subscribed after the first piece
                on_delta(delta)

            return await super().complete(request, relay)

    done = await DeltaRelay(told, 7, wanted=lambda: watching[0]).stream(Watched(), REQUEST)  # type: ignore[arg-type]
    assert streamed(done, told) == "llo"
