"""Vision: a question about an image file, sent as a neutral image block.

Run ``python examples/vision.py`` to ask about ``examples/red_square.png``, or
``python examples/vision.py PATH "QUESTION"`` for your own image.
``ImageBlock.from_path`` reads the file and takes its media type from the
bytes (not the file name); the block goes in the user message beside the
question, and each backend sends it its own way (the Messages API's ``image``
block, Ollama's ``images`` list, an ``image_url`` part on the Chat Completions
wire). An image the backend cannot take (over its documented size, a type it
does not read) is refused before anything is sent, as ``llm-encode`` naming
the limit.

With nothing configured the scripted stub answers (it reads no pixels); the
first line says which backend answers. Set
``VAELII_LLM_PROVIDER=anthropic`` (``ANTHROPIC_API_KEY``), ``ollama`` with a
vision model (``VAELII_OLLAMA_MODEL=qwen2.5vl``, say), or ``openai`` (a server
at ``OPENAI_BASE_URL`` serving one) to have a real model look.
"""

from __future__ import annotations

import sys
from pathlib import Path

from _answering import Progress
from _answering import run
from _answering import who_answers

from vaelii_llm import ImageBlock
from vaelii_llm import Message
from vaelii_llm import Request
from vaelii_llm import TextBlock
from vaelii_llm import errors
from vaelii_llm import providers

IMAGE = Path(__file__).with_name("red_square.png")
QUESTION = "What shape is in this image, and what colour is it? One sentence."

STUB_ANSWER = "A red square on a white background."
"""What the stub answers when no real model is configured."""


async def ask(question: str = QUESTION, image: Path = IMAGE) -> str:
    """One turn: the image, then the question; the answer's text."""
    request = Request(
        messages=[
            Message(role="user", content=[ImageBlock.from_path(image), TextBlock(text=question)])
        ],
        max_tokens=300,
        timeout_ms=120_000,
    )
    async with await providers.provider(stub={"script": [STUB_ANSWER]}) as model:
        print(await who_answers(model))
        async with Progress():  # a terminal sees how long the turn has taken
            response = await model.complete(request)
    return "".join(b.text for b in response.content if isinstance(b, TextBlock))


async def main(argv: list[str]) -> int:
    image = Path(argv[0]) if argv else IMAGE
    question = argv[1] if len(argv) > 1 else QUESTION
    try:
        answer = await ask(question, image)
    except (OSError, ValueError) as exc:  # no such file, or bytes that are no image
        print(f"cannot read {image}: {exc}", file=sys.stderr)
        return 2
    except errors.LLMError as exc:
        print(f"{exc.type}: {exc}", file=sys.stderr)
        return 1
    print(answer)
    return 0


if __name__ == "__main__":
    sys.exit(run(main(sys.argv[1:])))
