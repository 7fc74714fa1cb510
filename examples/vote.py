"""A yes/no vote over the configured model hosts.

Run ``python examples/vote.py [QUESTION]``. The question is asked several times
at once over a pool of providers, each answer's first word is read as yes or
no, and the majority is the verdict (a tie, or no vote at all, is ``abstain``);
a turn that failed is counted apart. ``on_vote`` sees the vote so far as each
turn finishes, so a progress line needs no bookkeeping of its own.

With nothing configured the scripted stub votes. A backend with no host
list (the Messages API, on any server that serves it) votes on its one host.
To vote over real hosts, set
``VAELII_LLM_PROVIDER=ollama`` and ``VAELII_OLLAMA_HOSTS=http://gpu1:11434*2,http://gpu2:11434``
(``*n``: calls one host takes at once); without ``VAELII_OLLAMA_HOSTS`` the one
``VAELII_OLLAMA_HOST`` votes. A vLLM fleet is ``VAELII_LLM_PROVIDER=openai``
and ``VAELII_OPENAI_HOSTS=gpu1:8000*4,gpu2:8000*4`` (base URLs, ``/v1`` when
they name no path); without it the one ``OPENAI_BASE_URL`` votes.
"""

from __future__ import annotations

import sys

from _answering import run

from vaelii_llm import Message
from vaelii_llm import Request
from vaelii_llm import config
from vaelii_llm import pool

QUESTION = "Is a spider an insect? Answer yes or no first, then one sentence."

# What the stub answers when no host is configured.
STUB_VOTES = ["No, a spider is an arachnid.", "Yes.", "No: eight legs, not six."]


def show_progress(so_far: pool.Vote) -> None:
    print(
        f"  {len(so_far.votes)}/{so_far.calls} in: yes {so_far.tally['yes']}, "
        f"no {so_far.tally['no']}, failed {so_far.failed}"
    )


async def main(question: str) -> int:
    try:
        # Over the configured kind's hosts switch where its record names one,
        # else its one host; a kind providers.register() added too.
        voters = await pool.pool_from_config(kind=config.provider_kind())
        print(f"answering: {config.provider_kind()} hosts, real models")
    except ValueError as not_a_model:  # the stub: nothing to spread over
        print(f"answering: the scripted stub, not a model ({not_a_model})")
        voters = pool.stub_pool(script=STUB_VOTES)
    print(f"voting over {voters.size} provider token(s): {question}")
    request = Request(
        messages=[Message(role="user", content=question)], max_tokens=64, timeout_ms=120_000
    )
    async with voters:
        outcome = await pool.vote(voters, request, votes=3, on_vote=show_progress)
    # As `vaelii-llm vote` prints it: a turn whose first word was neither yes
    # nor no is in no tally; a failed one is counted apart, with its reason.
    tally = outcome.tally
    print(
        f"verdict: {outcome.verdict}  tally: yes {tally['yes']}, no {tally['no']}  "
        f"failed: {outcome.failed} of {outcome.calls}"
    )
    if outcome.errors:
        print(f"first failure: {outcome.errors[0].type}: {outcome.errors[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(run(main(" ".join(sys.argv[1:]) or QUESTION)))
