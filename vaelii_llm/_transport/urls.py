"""A URL's user info, found and cut by one rule: what a display shows of a URL
(:func:`hide_userinfo`) and what the transport withholds from an error
(:mod:`~vaelii_llm._transport.withheld`, through :func:`userinfo`) read a
password the same way, so no form of one a parser would misread is shown.

Plain text work, no I/O and no HTTP library: a switch's display, a refusal
naming a host and a pool's label use it as well as the transport.
"""

from __future__ import annotations

import re

__all__ = ["hide_userinfo", "userinfo"]

_USERINFO = re.compile(r"(//)((?:(?!://)\S)*@)|(^|[,\s])((?:(?!://)[^\s,])*@)")
"""Where a URL's user info may be: after ``//``, up to the last ``@`` before a
space or another ``scheme://``; in an entry of a host list with no scheme, up
to its last ``@`` before a comma. :func:`_userinfo_end` says how much of it is."""

_HOST_PORT = re.compile(r"(\[[0-9A-Fa-f:.]*\]|[\w.~%!$&'()*+,;=-]*)(:\d+)?")
"""An authority with no user info, as a parser reads one: a host, and a port of digits."""

_FAR_END = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[\w-]+(\.[\w-]+)+|[\w.-]+(?=:\d))(:\d+)?([/?#\s,*]|$)")
"""What reads as the host a URL reaches: an IPv6 literal, a name with a dot, or a
name with a port; then the path, the end, or the host list's next word."""


def _userinfo_end(candidate: str, text: str, after: int) -> int:
    """How much of ``candidate`` (from after ``//`` to an ``@``, followed in
    ``text`` by what is at ``after``) is user info.

    A URL a parser reads (yarl, urllib) ends its authority at the first
    ``/``, ``?`` or ``#``, and its user info at the last ``@`` inside it; an
    ``@`` after that is in the path, query or fragment. A password holding an
    unencoded ``/``, ``?`` or ``#`` is read otherwise, and shown: so the user
    info runs to the last ``@`` when what follows it reads as the host
    (:data:`_FAR_END`), or when the authority a parser reads is no host and
    port (``user:pa#ss@host`` reads as host ``user``, port ``pa``).
    """
    authority = re.split(r"[/?#]", candidate, maxsplit=1)[0]
    if len(authority) < len(candidate) - 1 and _FAR_END.match(text, after):
        return len(candidate)
    if "@" in authority:
        return authority.rindex("@") + 1
    if _HOST_PORT.fullmatch(authority):
        return 0
    return len(candidate)


_SECRET_PARAMETER = re.compile(r"(?i)([?&;][\w.-]*(?:pass|pwd|secret|token|key)[\w.-]*=)[^&#\s,]*")
"""A query parameter whose name says its value is a credential: redis-py's
documented ``?password=`` (``redis://``, ``unix://``), a ``token=``, an ``api_key=``."""


def hide_userinfo(value: str) -> str:
    """``value`` with every ``user:password@`` cut out of the URLs or hosts it
    names (a comma-separated host list included), and the value of every query
    parameter naming a credential (:data:`_SECRET_PARAMETER`) withheld, for
    messages and displays."""

    def cut(found: re.Match[str]) -> str:
        lead, candidate = (found[1], found[2]) if found[1] else (found[3], found[4])
        return lead + candidate[_userinfo_end(candidate, value, found.end()) :]

    shown = _USERINFO.sub(cut, value)
    if "=" in shown:
        shown = _SECRET_PARAMETER.sub(r"\1<withheld>", shown)
    return shown


def userinfo(url: str) -> str | None:
    """The ``user:password`` (or ``user``) of ``url``, read by the rule
    :func:`hide_userinfo` cuts by (never by a URL parser alone, which reads a
    malformed one otherwise); None when it names none."""
    text = url.strip()
    for found in _USERINFO.finditer(text):
        candidate = found[2] if found[1] else found[4]
        end = _userinfo_end(candidate, text, found.end())
        if end:
            return candidate[: end - 1]
    return None
