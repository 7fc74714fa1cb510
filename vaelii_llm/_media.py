"""Images and documents as neutral blocks, and the checks a backend runs on them.

An :class:`ImageBlock` or :class:`DocumentBlock` holds its bytes (sent
base64-encoded; msgspec writes ``bytes`` as base64 itself), a URL the far end
fetches, or, for a document, plain text. Built from a file or from bytes, the
media type is read from the bytes' magic numbers, never from a file name alone
(a ``.png`` that is a JPEG is sent as the JPEG it is).

Each backend declares what it takes once, as a :class:`MediaLimits` beside its
encoder; :func:`check_image` and :func:`check_document` refuse a block over a
limit, or of a type the far end does not take, with
:class:`~vaelii_llm.errors.LLMEncode` naming the limit, while the body is
built, so no byte is sent.
"""

from __future__ import annotations

from os import PathLike
from typing import Any
from typing import ClassVar
from typing import Final
from typing import Self

from msgspec import Struct

__all__ = [
    "MAX_BASE64",
    "MB",
    "URL_SCHEMES",
    "WEB_IMAGE_TYPES",
    "DocumentBlock",
    "ImageBlock",
    "MediaLimits",
    "base64_size",
    "check_document",
    "check_image",
    "sniff",
]

PDF: Final = "application/pdf"
PLAIN: Final = "text/plain"
MB: Final = 1024 * 1024
MAX_BASE64: Final = 50 * MB
"""The most any backend here takes in one block, in any encoding (OpenAI's
documented 50 MB request payload, the largest): every backend's limit is at most
this (Ollama, which documents none, gets it), and ``from_path`` reads no larger
file."""
WEB_IMAGE_TYPES: Final = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
"""The image types the hosted APIs document taking (the ones :func:`sniff` knows)."""

_MAGIC: Final = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"%PDF-", PDF),
)


def sniff(data: bytes) -> str | None:
    """The media type the bytes' magic numbers name (PNG, JPEG, GIF, WebP,
    PDF), or None for any other."""
    for magic, media_type in _MAGIC:
        if data.startswith(magic):
            return media_type
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def base64_size(size: int) -> int:
    """How many characters ``size`` bytes take base64-encoded."""
    return 4 * ((size + 2) // 3)


def _one_source(kind: str, **sources: object) -> None:
    given = [name for name, value in sources.items() if value is not None]
    if len(given) != 1:
        names = " or ".join(sources)
        raise ValueError(f"an {kind} holds exactly one of {names}, not {given or 'none'}")


def _read(path: str | PathLike[str]) -> bytes:
    from vaelii_llm._files import read_regular  # a block built from bytes never loads it

    return read_regular(path, MAX_BASE64, "a media file")


def _shown(value: bytes | str | None, unit: str) -> str:
    return "None" if value is None else f"<{len(value)} {unit}>"


class ImageBlock(Struct, frozen=True, kw_only=True, repr_omit_defaults=True):
    """An image: ``data`` (the bytes, with their ``media_type``) or ``url``
    (which the far end fetches). In a user message, or in a tool result's
    content list. ``ImageBlock.from_path(path)`` and ``.from_bytes(data)``
    read the media type from the bytes."""

    type: ClassVar[str] = "image"
    data: bytes | None = None
    media_type: str | None = None
    url: str | None = None
    raw: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        _one_source("image", data=self.data, url=self.url)
        if self.data is not None and not self.media_type:
            raise ValueError("an image's bytes need their media_type (from_bytes finds it)")

    def __repr__(self) -> str:  # never megabytes of bytes in a log line
        where = f"url={self.url!r}" if self.url is not None else _shown(self.data, "bytes")
        return f"ImageBlock({where}, media_type={self.media_type!r})"

    @classmethod
    def from_bytes(cls, data: bytes, media_type: str | None = None) -> Self:
        """An image of ``data``; its type read from its magic numbers (PNG,
        JPEG, GIF, WebP). ``media_type`` names one the bytes cannot show; it
        must agree with them where they do. ValueError otherwise."""
        return cls(data=bytes(data), media_type=_media_type(data, media_type, "image", "image/"))

    @classmethod
    def from_path(cls, path: str | PathLike[str], media_type: str | None = None) -> Self:
        """The image in the file at ``path`` (read now), as :meth:`from_bytes`.
        Only a regular file of at most :data:`MAX_BASE64` bytes is read
        (ValueError before a byte is, else); the reading blocks, so a coroutine
        calls this through ``asyncio.to_thread``."""
        return cls.from_bytes(_read(path), media_type)


class DocumentBlock(Struct, frozen=True, kw_only=True, repr_omit_defaults=True):
    """A document: a PDF as ``data`` (``media_type`` ``application/pdf``) or
    as a ``url``, or plain ``text``. ``title`` is shown to the model where
    the far end takes one. ``DocumentBlock.from_path(path)`` reads a PDF, or
    a UTF-8 text file as text."""

    type: ClassVar[str] = "document"
    data: bytes | None = None
    media_type: str | None = None
    url: str | None = None
    text: str | None = None
    title: str | None = None
    raw: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        _one_source("document", data=self.data, url=self.url, text=self.text)
        if self.data is not None and not self.media_type:
            raise ValueError("a document's bytes need their media_type (from_bytes finds it)")

    def __repr__(self) -> str:  # never a whole PDF in a log line
        if self.url is not None:
            where = f"url={self.url!r}"
        elif self.text is not None:
            where = f"text={_shown(self.text, 'chars')}"
        else:
            where = f"data={_shown(self.data, 'bytes')}, media_type={self.media_type!r}"
        title = f", title={self.title!r}" if self.title is not None else ""
        return f"DocumentBlock({where}{title})"

    @classmethod
    def from_bytes(
        cls, data: bytes, media_type: str | None = None, *, title: str | None = None
    ) -> Self:
        """A PDF (read from its magic number), or UTF-8 text as a text
        document; ``media_type`` names another the bytes cannot show.
        ValueError for bytes that are neither."""
        found = sniff(data)
        if found == PDF or (media_type is not None and media_type != PLAIN):
            kind = _media_type(data, media_type, "document", "application/")
            return cls(data=bytes(data), media_type=kind, title=title)
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is None or "\x00" in text or found is not None:
            shown = found or "binary"
            raise ValueError(f"a document is a PDF or UTF-8 text; these bytes are {shown}")
        return cls(text=text, title=title)

    @classmethod
    def from_path(
        cls, path: str | PathLike[str], media_type: str | None = None, *, title: str | None = None
    ) -> Self:
        """The document in the file at ``path`` (read now), as :meth:`from_bytes`,
        bounded as :meth:`ImageBlock.from_path`."""
        return cls.from_bytes(_read(path), media_type, title=title)


def _media_type(data: bytes, given: str | None, kind: str, family: str) -> str:
    found = sniff(data)
    if found is not None and not found.startswith(family):
        raise ValueError(f"these bytes are {found}, not an {kind}")
    if given is not None and found is not None and given != found:
        raise ValueError(f"these bytes are {found}, not {given}")
    if found is None and given is None:
        raise ValueError(
            "the bytes' type is not one this package recognises (PNG, JPEG, GIF, WebP, "
            "PDF); name it with media_type= if the far end takes it"
        )
    return found or given  # type: ignore[return-value]  # one of them is set


class MediaLimits(Struct, frozen=True, gc=False):
    """What one far end takes, from its documentation: the image media types
    (None: it documents none, so none is refused here), the largest image's
    base64 length and the largest document's (None: no documented limit),
    the phrase that names each limit in a refusal, and the media types a
    document's bytes may have."""

    image_types: frozenset[str] | None
    image_base64: int | None
    image_limit: str
    document_base64: int | None = None
    document_limit: str = ""
    document_types: frozenset[str] = frozenset({PDF})

    def __post_init__(self) -> None:
        if (self.image_base64 is None) != (not self.image_limit):
            raise ValueError("an image limit and its phrase go together")


def _size_words(size: int, what: str = "base64-encoded") -> str:
    return f"{size / MB:.1f} MB {what}"


def _type_words(media_type: str | None, types: frozenset[str]) -> str:
    return f"its type {media_type!r} is not one it takes ({', '.join(sorted(types))})"


URL_SCHEMES: Final = frozenset({"http", "https"})
"""The schemes of a URL a block may send: the ones every far end here fetches.
A ``file:``, ``ftp:`` or ``javascript:`` URL would name what this host, not the
far end, may read; bytes go as ``data``, not as a ``data:`` URL."""


def _check_url(block: ImageBlock | DocumentBlock, label: str) -> None:
    from vaelii_llm.errors import LLMEncode  # only a turn with media loads it here

    url = block.url or ""
    scheme, colon, _ = url.partition(":")
    if not colon or scheme.lower() not in URL_SCHEMES:
        raise LLMEncode(
            block.type,
            label,
            reason=f"its URL is not http(s) ({url[:40]!r}); send the bytes instead",
        )


def check_image(block: ImageBlock, limits: MediaLimits, label: str) -> None:
    """Refuse (LLMEncode, naming the limit) an image of a type the far end
    does not take, or over its size, or a URL that is not http(s). A URL's
    image is the far end's to read."""
    if block.data is None:
        _check_url(block, label)
        return
    from vaelii_llm.errors import LLMEncode  # only a turn with an image loads it here

    types = limits.image_types
    if types is not None and block.media_type not in types:
        raise LLMEncode("image", label, reason=_type_words(block.media_type, types))
    if limits.image_base64 is not None:
        size = base64_size(len(block.data))
        if size > limits.image_base64:
            raise LLMEncode(
                "image",
                label,
                reason=f"it is {_size_words(size)}, over {limits.image_limit}",
            )


def check_document(block: DocumentBlock, limits: MediaLimits, label: str) -> None:
    """Refuse (LLMEncode, naming the limit) a document's bytes of a type the
    far end does not take, bytes or text over its size, or a URL that is not
    http(s)."""
    if block.url is not None:
        _check_url(block, label)
        return
    from vaelii_llm.errors import LLMEncode

    if block.text is not None:
        size, what = len(block.text.encode("utf-8")), "of text"
    else:
        types = limits.document_types
        if block.media_type not in types:
            raise LLMEncode("document", label, reason=_type_words(block.media_type, types))
        size, what = base64_size(len(block.data or b"")), "base64-encoded"
    if limits.document_base64 is not None and size > limits.document_base64:
        reason = f"it is {_size_words(size, what)}, over {limits.document_limit}"
        raise LLMEncode("document", label, reason=reason)
