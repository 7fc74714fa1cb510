"""The neutral request/response types: defaults, the UNSET/None distinction, equality."""

from __future__ import annotations

import msgspec
import pytest

from vaelii_llm import _protocol as proto
from vaelii_llm._protocol import UNSET
from vaelii_llm._protocol import Message
from vaelii_llm._protocol import OpaqueBlock
from vaelii_llm._protocol import Provider
from vaelii_llm._protocol import ProviderBase
from vaelii_llm._protocol import RedactedThinkingBlock
from vaelii_llm._protocol import Request
from vaelii_llm._protocol import Response
from vaelii_llm._protocol import TextBlock
from vaelii_llm._protocol import ThinkingBlock
from vaelii_llm._protocol import ToolResultBlock
from vaelii_llm._protocol import ToolSchema
from vaelii_llm._protocol import ToolUseBlock
from vaelii_llm._protocol import Usage


def test_request_defaults_leave_fallbacks_unset_not_none() -> None:
    req = Request(messages=[Message(role="user", content="hi")])
    assert req.fallbacks is UNSET
    assert Request(messages=[], fallbacks=None).fallbacks is None
    assert req.tools == []
    assert req.stop_sequences == []
    assert req.timeout_ms == 60_000
    assert req.max_tokens == 1024


def test_default_lists_are_not_shared_between_requests() -> None:
    a = Request(messages=[])
    b = Request(messages=[])
    assert a.tools is not b.tools


@pytest.mark.parametrize(
    ("block", "kind"),
    [
        (TextBlock(text="x"), "text"),
        (ThinkingBlock(thinking="t", signature="s"), "thinking"),
        (RedactedThinkingBlock(data="d"), "redacted_thinking"),
        (ToolUseBlock(id="1", name="kb_ask", input={}), "tool_use"),
        (ToolResultBlock(tool_use_id="1", content="ok"), "tool_result"),
        (OpaqueBlock(type="server_tool_use", raw={"type": "server_tool_use"}), "server_tool_use"),
    ],
)
def test_every_block_names_its_type(block: object, kind: str) -> None:
    assert block.type == kind  # type: ignore[attr-defined]


def test_type_is_not_a_field_of_modelled_blocks() -> None:
    # `type` is a class constant, so a block cannot be built claiming another type.
    with pytest.raises(TypeError):
        TextBlock(text="x", type="thinking")  # type: ignore[call-arg]


def test_blocks_compare_by_value_including_raw() -> None:
    assert TextBlock(text="a", raw={"type": "text", "text": "a"}) == TextBlock(
        text="a", raw={"type": "text", "text": "a"}
    )
    assert TextBlock(text="a") != TextBlock(text="a", raw={"type": "text", "text": "a"})


def test_response_usage_defaults_and_equality() -> None:
    r1 = Response(content=[TextBlock(text="a")], stop_reason="end_turn")
    r2 = Response(content=[TextBlock(text="a")], stop_reason="end_turn")
    assert r1 == r2
    assert r1.usage == Usage()
    assert r1 != Response(content=[TextBlock(text="a")], stop_reason="refusal")


def test_tool_schema_encodes_without_unset_strict() -> None:
    schema = ToolSchema(name="kb_ask", description="d", input_schema={"type": "object"})
    assert msgspec.json.decode(msgspec.json.encode(schema)) == {
        "name": "kb_ask",
        "description": "d",
        "input_schema": {"type": "object"},
    }
    strict = ToolSchema(name="n", description="d", input_schema={}, strict=True)
    assert msgspec.json.decode(msgspec.json.encode(strict))["strict"] is True


def test_repr_is_short() -> None:
    assert repr(Usage(eval_count=3)) == "Usage(eval_count=3)"


async def test_provider_base_is_an_async_context_manager() -> None:
    closed: list[bool] = []

    class Closing(ProviderBase):
        async def aclose(self) -> None:
            closed.append(True)

    async with Closing() as p:
        assert isinstance(p, Closing)
    assert closed == [True]


def test_stub_satisfies_the_protocol() -> None:
    from vaelii_llm.providers import stub

    assert isinstance(stub.provider(), Provider)


def test_module_docstring_lists_every_request_and_response_field() -> None:
    from vaelii_llm import _protocol as protocol

    doc = protocol.__doc__ or ""
    for struct in (Request, Response):
        for name in struct.__struct_fields__:
            assert f"``{name}``" in doc, f"{struct.__name__}.{name} is not in the docstring"


_COUNTED = (
    *(("token", name) for name in proto._TOKEN_FIELDS),
    *(("duration", name) for name in proto._DURATION_FIELDS),
)


@pytest.mark.parametrize(("kind", "name"), _COUNTED)
def test_every_count_of_a_usage_is_held_to_its_bounds(kind: str, name: str) -> None:
    most = proto.MAX_TOKEN_COUNT if kind == "token" else proto.MAX_DURATION_NS
    fine = {"input_tokens": 3, "output_tokens": 4, "total_duration": 5}
    assert proto.usage_fault(proto.Usage(**{**fine, name: 0})) is None
    assert proto.usage_fault(proto.Usage(**{**fine, name: most})) is None
    for wrong in (-1, most + 1):
        fault = proto.usage_fault(proto.Usage(**{**fine, name: wrong}))
        assert fault == f"reported a usage whose {name} is {wrong}, outside 0 to {most}"
    assert set(proto.Usage.__struct_fields__) - {n for _, n in _COUNTED} == {"extra"}


BAD_FIELDS: list[tuple[dict[str, object], type[Exception], str]] = [
    ({"timeout_ms": float("nan")}, TypeError, "Request.timeout_ms takes a whole number of ms"),
    ({"timeout_ms": 10**400}, ValueError, "got a number of 25 digits or more"),
    ({"timeout_ms": 0}, ValueError, "Request.timeout_ms takes a whole number of ms, 1 to"),
    ({"timeout_ms": True}, TypeError, "Request.timeout_ms .*; got bool"),
    ({"stall_ms": 10**400}, ValueError, "Request.stall_ms .*25 digits or more"),
    ({"stall_ms": 1.5}, TypeError, "Request.stall_ms"),
    ({"max_tokens": 0}, ValueError, "Request.max_tokens takes a whole number, 1 to 1000000000"),
    ({"max_tokens": "8"}, TypeError, "Request.max_tokens .*; got str"),
    ({"num_ctx": -1}, ValueError, "Request.num_ctx"),
    ({"temperature": float("nan")}, ValueError, "Request.temperature takes a number from 0 to 2"),
    ({"temperature": float("inf")}, ValueError, "Request.temperature .*; got inf"),
    ({"temperature": "hot"}, TypeError, "Request.temperature"),
    (
        {"messages": [Message(role="user", content="hi"), {"role": "user"}]},
        TypeError,
        "got dict at 1",
    ),
    (
        {"messages": (Message(role="user", content="hi"),)},
        TypeError,
        "Request.messages .*; got tuple",
    ),
    ({"system": [TextBlock(text="a"), "b"]}, TypeError, "Request.system .*; got str at 1"),
    ({"model": 3}, TypeError, "Request.model takes a str or None; got int"),
    (
        {"tools": [{"name": "x"}]},
        TypeError,
        "Request.tools takes a list of ToolSchema; got dict at 0",
    ),
    ({"stop_sequences": ["END", None]}, TypeError, "Request.stop_sequences .*; got NoneType at 1"),
    ({"format": "json"}, TypeError, "Request.format"),
    ({"effort": 2}, TypeError, "Request.effort"),
    ({"thinking_display": True}, TypeError, "Request.thinking_display"),
    ({"keep_alive": 5}, TypeError, "Request.keep_alive"),
    ({"fallbacks": ["m", 1]}, TypeError, "Request.fallbacks .*; got int at 1"),
    ({"think": "max"}, ValueError, "Request.think takes True, False, 'low', 'medium', 'high'"),
    ({"think": 1}, TypeError, "Request.think .*; got int"),
    ({"cache": {"auto": True}}, TypeError, "Request.cache takes a Cache or None; got dict"),
    ({"tool_choice": None}, TypeError, "Request.tool_choice takes 'auto', 'none', 'required'"),
    ({"tool_choice": "kb_query"}, ValueError, "the name of one of its tools; got 'kb_query'"),
    ({"tool_choice": "any"}, ValueError, "Request.tool_choice .*; got 'any'"),
]


@pytest.mark.parametrize(("fields", "kind", "says"), BAD_FIELDS)
def test_every_request_field_is_checked_for_type_and_range_as_it_is_made(
    fields: dict[str, object], kind: type[Exception], says: str
) -> None:
    """(#58) ``timeout_ms=NaN`` was accepted (only ``stall_ms`` was checked, when
    sent) and a 400-digit budget was a bare ``OverflowError``: each field is
    refused as the request is made, by type (``TypeError``) or range
    (``ValueError``), naming the field and what it takes, never a value of 400 digits."""
    fields.setdefault("messages", [Message(role="user", content="hi")])
    with pytest.raises(kind, match=says) as caught:
        Request(**fields)  # type: ignore[arg-type]
    assert len(str(caught.value)) < 200
    with pytest.raises(kind, match=says):  # a copy with one field changed is checked too
        msgspec.structs.replace(Request(messages=[]), **fields)


def test_every_request_field_has_one_rule_and_good_values_pass() -> None:
    assert tuple(name for name, _ in proto._RULES) == Request.__struct_fields__
    Request(
        messages=[Message(role="user", content="hi")],
        system=[TextBlock(text="s")],
        model="m",
        tools=[ToolSchema(name="t", description="d", input_schema={})],
        max_tokens=proto.MAX_TOKEN_COUNT,
        timeout_ms=proto.MAX_WAIT_MS,
        stop_sequences=["END"],
        format={"type": "object"},
        effort="high",
        thinking_display="summarized",
        temperature=2,
        num_ctx=1,
        keep_alive="5m",
        fallbacks=["a"],
        think="low",
        cache=proto.Cache(auto=True),
        stall_ms=1,
        tool_choice="t",
    )
    Request(messages=[], temperature=0.0, think=False, fallbacks="a", system="s")
    for word in ("auto", "none", "required"):
        assert Request(messages=[], tool_choice=word).tool_choice == word
