"""What a corpus name, a document id and a metadata key may be. Checked where they enter
(the admin API, the CLI, start-up preload), so stores and prompts only ever see sane ones."""

from __future__ import annotations

import re

from deja.errors import InvalidRequestError

#: A corpus name: letters, digits, ``.``, ``_``, ``-``; up to 64 characters.
CORPUS_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
#: A metadata key: also a payload path segment, so no dots.
METADATA_KEY = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_DOCUMENT_ID = 512
MAX_METADATA_VALUE = 256
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: Bidirectional controls: an id shown as ``report.md`` may be stored as ``report\u202edm.txt``.
BIDI_CONTROLS = re.compile("[\u200e\u200f\u061c\u202a-\u202e\u2066-\u2069]")
#: What undecodable bytes become when a URL path is decoded: two different byte names would
#: both become the same id, so such an id is refused rather than collided.
REPLACEMENT = "\ufffd"


def check_corpus_name(name: str) -> str:
    if not CORPUS_NAME.fullmatch(name):
        raise InvalidRequestError(
            f"invalid corpus name {name!r}: 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit",
            param="corpus",
        )
    return name


def check_document_id(document: str) -> str:
    """A relative POSIX path (``docs/architecture.md``): no leading ``/``, no ``.``/``..`` or
    empty segments, no backslashes or control characters; no bidirectional controls and no
    U+FFFD (bytes that were not UTF-8), each refused with its own reason."""
    if BIDI_CONTROLS.search(document):
        raise InvalidRequestError(
            f"invalid document id {document.encode('unicode_escape').decode()!r}: it contains "
            "a bidirectional control character (U+200E/F, U+061C, U+202A-202E, U+2066-2069)",
            param="document",
        )
    if REPLACEMENT in document:
        raise InvalidRequestError(
            f"invalid document id {document!r}: it is not valid UTF-8 (U+FFFD), so it could not "
            "be told apart from other names",
            param="document",
        )
    segments = document.split("/")
    if (
        not document
        or len(document) > MAX_DOCUMENT_ID
        or _CONTROL.search(document)
        or "\\" in document
        or any(s in ("", ".", "..") for s in segments)
    ):
        raise InvalidRequestError(
            f"invalid document id {document!r}: a relative path like docs/guide.md "
            f"(at most {MAX_DOCUMENT_ID} characters, no '.', '..' or empty segments)",
            param="document",
        )
    return document


def check_metadata(metadata: dict[str, str], param: str = "metadata") -> dict[str, str]:
    for key, value in metadata.items():
        if not METADATA_KEY.fullmatch(key):
            raise InvalidRequestError(
                f"invalid metadata key {key!r}: 1-64 letters, digits, '_' or '-'", param=param
            )
        if not isinstance(value, str) or len(value) > MAX_METADATA_VALUE:
            raise InvalidRequestError(
                f"metadata {key!r} must be a string of at most {MAX_METADATA_VALUE} characters",
                param=param,
            )
    return metadata
