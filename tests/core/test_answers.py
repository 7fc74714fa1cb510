"""Typed answers (#62 item 3): ``vaelii_llm.answer`` on the stub, every kind of type."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from contextlib import aclosing
from typing import Any
from typing import TypedDict

import msgspec
import pydantic
import pytest

import vaelii_llm
from vaelii_llm import Message
from vaelii_llm import Request
from vaelii_llm import Response
from vaelii_llm import TextBlock
from vaelii_llm import Usage
from vaelii_llm._answers import REASK
from vaelii_llm.errors import LLMBadAnswer
from vaelii_llm.errors import LLMTimeout
from vaelii_llm.providers import stub


class Animal(msgspec.Struct):
    name: str
    legs: int


class AnimalDict(TypedDict):
    name: str
    legs: int


@dataclasses.dataclass
class AnimalData:
    name: str
    legs: int


class AnimalModel(pydantic.BaseModel):
    name: str
    legs: int


GOOD = '{"name": "spider", "legs": 8}'
ASK = Request(messages=[Message(role="user", content="Describe a spider.")], max_tokens=100)


@pytest.mark.parametrize(
    ("into", "expected"),
    [
        (Animal, Animal(name="spider", legs=8)),
        (AnimalDict, {"name": "spider", "legs": 8}),
        (AnimalData, AnimalData(name="spider", legs=8)),
        (AnimalModel, AnimalModel(name="spider", legs=8)),
    ],
)
async def test_every_kind_of_type_is_answered_and_its_schema_goes_out(
    into: Any, expected: Any
) -> None:
    model = stub.provider(script=[GOOD])
    assert await vaelii_llm.answer(model, ASK, into=into) == expected
    [sent] = model.requests()
    assert sent.format is not None
    assert sent.format["type"] == "object"  # a top $ref is sent as its definition
    assert set(sent.format["properties"]) == {"name", "legs"}
    assert sorted(sent.format["required"]) == ["legs", "name"]


async def test_an_answer_that_does_not_fit_is_asked_again_with_the_error_shown() -> None:
    model = stub.provider(script=['{"name": "spider", "legs": "eight"}', GOOD])
    assert await vaelii_llm.answer(model, ASK, into=Animal) == Animal(name="spider", legs=8)
    again = model.requests()[1].messages
    assert [m.role for m in again] == ["user", "assistant", "user"]
    assert again[1].content == '{"name": "spider", "legs": "eight"}'
    assert again[2].content == REASK.format(error="Expected `int`, got `str` - at `$.legs`")


async def test_past_the_retries_the_typed_error_holds_every_attempt() -> None:
    model = stub.provider(script=["not JSON", '{"name": "spider"}', GOOD])
    with pytest.raises(LLMBadAnswer) as caught:
        await vaelii_llm.answer(model, ASK, into=Animal, retries=1)
    err = caught.value
    assert (err.type, err.into, err.cut, err.retryable) == (
        "llm-bad-answer",
        "Animal",
        False,
        False,
    )
    assert [text for text, _ in err.attempts] == ["not JSON", '{"name": "spider"}']
    assert "malformed" in err.attempts[0][1]
    assert "missing required field `legs`" in err.attempts[1][1]
    assert "after 2 attempt(s)" in str(err)
    assert len(model.requests()) == 2


async def test_no_retries_asks_once() -> None:
    model = stub.provider(script=["nope", GOOD])
    with pytest.raises(LLMBadAnswer):
        await vaelii_llm.answer(model, ASK, into=Animal, retries=0)
    assert len(model.requests()) == 1


async def test_a_cut_answer_is_said_as_such_and_never_asked_again() -> None:
    model = stub.provider(script=[{"text": '{"name": "spi', "stop_reason": "max_tokens"}, GOOD])
    with pytest.raises(LLMBadAnswer, match=r"cut at max_tokens \(100\)") as caught:
        await vaelii_llm.answer(model, ASK, into=Animal, retries=3)
    assert caught.value.cut is True
    assert caught.value.attempts == [('{"name": "spi', caught.value.reason)]
    assert len(model.requests()) == 1


async def test_a_refusal_is_refused_at_once() -> None:
    model = stub.provider(script=[{"refusal": "I will not."}, GOOD])
    with pytest.raises(LLMBadAnswer, match="the model refused"):
        await vaelii_llm.answer(model, ASK, into=Animal, retries=3)
    assert len(model.requests()) == 1


def _answering(text: str, output_tokens: int) -> Response:
    return Response(
        content=[TextBlock(text=text)],
        stop_reason="end_turn",
        usage=Usage(input_tokens=5, output_tokens=output_tokens),
    )


async def test_every_attempt_shares_the_token_budget() -> None:
    model = stub.provider(script=[_answering("no", 60), _answering("no", 40), _answering(GOOD, 1)])
    with pytest.raises(LLMBadAnswer, match="its max_tokens budget was spent") as caught:
        await vaelii_llm.answer(model, ASK, into=Animal, retries=5)
    assert [r.max_tokens for r in model.requests()] == [100, 40]
    assert len(caught.value.attempts) == 2


class Slow(stub.StubProvider):
    """The stub, each turn taking ``delay`` seconds."""

    def __init__(self, delay: float, script: list[Any]) -> None:
        super().__init__(script=script)
        self.delay = delay

    async def complete(self, request: Request) -> Response:
        await asyncio.sleep(self.delay)
        return await super().complete(request)


async def test_every_attempt_shares_the_deadline() -> None:
    model = Slow(0.15, ["no", "no", "no", GOOD])
    ask = msgspec.structs.replace(ASK, timeout_ms=400)
    with pytest.raises(LLMBadAnswer, match="its timeout_ms budget was spent"):
        await vaelii_llm.answer(model, ask, into=Animal, retries=10)
    budgets = [r.timeout_ms for r in model.requests()]
    assert budgets[0] == 400
    assert all(later < earlier for earlier, later in itertools.pairwise(budgets))
    assert len(budgets) <= 3


async def test_a_model_error_propagates_unchanged() -> None:
    model = stub.provider(script=[{"raise": "llm-timeout"}])
    with pytest.raises(LLMTimeout):
        await vaelii_llm.answer(model, ASK, into=Animal)


async def test_streamed_partial_values_then_the_validated_value() -> None:
    model = stub.provider(script=['{"name": "spider", "legs": "eight"}', GOOD])
    async with aclosing(vaelii_llm.answer(model, ASK, into=Animal).stream()) as parts:
        seen = [part async for part in parts]
    assert seen[-1] == Animal(name="spider", legs=8)
    first_try = seen[: seen.index({"name": "spider", "legs": "eight"}) + 1]
    assert first_try[0] == {}
    assert {"name": "spider"} in first_try
    after = seen[len(first_try) : -1]  # the re-ask's partial values start again
    assert after[0] == {}
    assert after[-1] == {"name": "spider", "legs": 8}
    assert all(isinstance(part, dict) for part in seen[:-1])


async def test_a_string_being_written_shows_as_far_as_it_has_come() -> None:
    partial = vaelii_llm._answers._partial('{"name": "spi')  # type: ignore[attr-defined]
    assert partial == {"name": "spi"}
    assert vaelii_llm._answers._partial("```json\n[1, 2") == [1, 2]  # type: ignore[attr-defined]
    assert vaelii_llm._answers._partial("Sure! {") is None  # type: ignore[attr-defined]


async def test_a_fenced_answer_is_read_without_its_fence() -> None:
    model = stub.provider(script=[f"```json\n{GOOD}\n```"])
    assert await vaelii_llm.answer(model, ASK, into=Animal) == Animal(name="spider", legs=8)


async def test_a_type_with_no_schema_and_a_bad_retries_are_refused() -> None:
    model = stub.provider()
    with pytest.raises(TypeError, match="into takes a msgspec Struct"):
        vaelii_llm.answer(model, ASK, into=object)
    for bad in (-1, True, 1.5):
        with pytest.raises(ValueError, match="retries"):
            vaelii_llm.answer(model, ASK, into=Animal, retries=bad)  # type: ignore[arg-type]
    assert model.requests() == []
