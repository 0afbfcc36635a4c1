"""Finding the files to ingest under the paths a person names (the CLI, start-up preload), and
the document id each gets: its path relative to the ingest root, with ``/`` separators
(``docs/architecture.md``), so the same tree ingested from anywhere gets the same ids.

Ingest never reads outside the tree it was given unless asked (``follow_symlinks``; the CLI's
``--follow-symlinks``, the preload's ``corpus_preload_follow_symlinks``): a ``passwd.md ->
/etc/passwd`` link in a docs tree was once ingested and then sent to the model in a RAG prompt
(issue 19). A link whose target stays inside the tree is taken (by its real path); one that leaves
it is *refused*, named with its reason, like a file whose name is not valid UTF-8 (it would
crash the request building, and a document id must be text).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from deja.corpus.parsing.base import EXTENSIONS

CONTENT_TYPES = {
    "markdown": "text/markdown",
    "text": "text/plain",
    "html": "text/html",
    "pdf": "application/pdf",
}


@dataclass
class Collected:
    """What :func:`collect` found: (document id, file) to ingest, sorted by id, and the paths
    refused with their reasons (shown by name, never read)."""

    files: list[tuple[str, Path]] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)


def content_type_for(path: str | Path) -> str:
    """The content type sent for a file, from its extension."""
    fmt = EXTENSIONS.get(Path(path).suffix.lower())
    return CONTENT_TYPES[fmt] if fmt else "application/octet-stream"


def shown(path: Path | str) -> str:
    """A path as text that can always be printed: undecodable bytes as ``\\xNN``."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def document_id(file: Path, root: Path, given: Path) -> str:
    """``file`` relative to ``root`` when it lies under it, else relative to the parent of the
    path it was found under (``given``): ``/srv/manual/a.html`` named as ``/srv/manual`` from
    elsewhere becomes ``manual/a.html``. The path as found comes first (a link keeps its own
    name), then the real paths (a root named through a link)."""
    absolute = Path(os.path.abspath(file))
    bases = (Path(os.path.abspath(root)), Path(os.path.abspath(given)).parent)
    for path, base in [(absolute, b) for b in bases] + [
        (file.resolve(), b.resolve()) for b in bases
    ]:
        try:
            return path.relative_to(base).as_posix()
        except ValueError:
            continue
    return file.name


def _valid_name(path: Path) -> bool:
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:  # surrogate-escaped bytes: the name is not UTF-8
        return False
    return True


def _inside(path: Path, tree: Path) -> bool:
    return path == tree or path.is_relative_to(tree)


def _walk(given: Path, follow_symlinks: bool) -> Iterable[Path]:
    """The files under ``given`` (hidden entries skipped), sorted; linked folders are entered
    only when following links, each real folder once (a link loop ends)."""
    seen: set[Path] = set()
    for top, dirs, names in os.walk(given, followlinks=follow_symlinks):
        real = Path(top).resolve()
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            if not name.startswith("."):
                yield Path(top) / name


def _check(file: Path, tree: Path, follow_symlinks: bool) -> str | None:
    """Why ``file`` is refused (None: take it)."""
    if not _valid_name(file):
        return "the file name is not valid UTF-8"
    if follow_symlinks:
        return None
    real = file.resolve()
    if not _inside(real, tree):
        return (
            f"a symbolic link to {shown(real)}, outside {shown(tree)} "
            "(pass --follow-symlinks to ingest it)"
        )
    return None


def collect(paths: Iterable[Path], root: Path, *, follow_symlinks: bool = False) -> Collected:
    """(document id, file) for every file to ingest, sorted by id, and the files refused. A
    directory is walked (hidden files and folders skipped) for the supported extensions; a file
    named on its own is taken whatever its extension (an unsupported one is then reported as
    failed). Without ``follow_symlinks`` a file must resolve inside the folder walked (a file
    named on its own: inside ``root`` or its own folder), and the file returned is its real
    path. Raises ``FileNotFoundError`` for a path that does not exist."""
    found: dict[str, Path] = {}
    out = Collected()
    for given in paths:
        if not given.exists():
            raise FileNotFoundError(f"no such file or directory: {shown(given)}")
        if given.is_file():
            trees = (root.resolve(), given.absolute().parent.resolve())
            reasons = [_check(given, tree, follow_symlinks) for tree in trees]
            if all(reasons):
                out.refused.append((shown(given), reasons[-1] or ""))
            else:
                target = given if follow_symlinks else given.resolve()
                found.setdefault(document_id(given, root, given), target)
            continue
        tree = given.resolve()
        for file in _walk(given, follow_symlinks):
            if file.suffix.lower() not in EXTENSIONS or not file.is_file():
                continue
            reason = _check(file, tree, follow_symlinks)
            if reason:
                out.refused.append((shown(file), reason))
                continue
            found.setdefault(
                document_id(file, root, given), file if follow_symlinks else file.resolve()
            )
    out.files = sorted(found.items())
    return out


def read_document(file: Path, *, follow_symlinks: bool = False) -> bytes:
    """The bytes of a file :func:`collect` returned. Without ``follow_symlinks`` the file (its
    real path) is opened with ``O_NOFOLLOW``, so a link swapped in after the walk is not
    read through."""
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(file, flags)
    with os.fdopen(fd, "rb") as handle:
        return handle.read()
