"""Finding the files to ingest under the paths a person names (the CLI, start-up preload), and
the document id each gets: its path relative to the ingest root, with ``/`` separators
(``docs/architecture.md``), so the same tree ingested from anywhere gets the same ids."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from deja.corpus.parsing.base import EXTENSIONS

CONTENT_TYPES = {
    "markdown": "text/markdown",
    "text": "text/plain",
    "html": "text/html",
    "pdf": "application/pdf",
}


def content_type_for(path: str | Path) -> str:
    """The content type sent for a file, from its extension."""
    fmt = EXTENSIONS.get(Path(path).suffix.lower())
    return CONTENT_TYPES[fmt] if fmt else "application/octet-stream"


def document_id(file: Path, root: Path, given: Path) -> str:
    """``file`` relative to ``root`` when it lies under it, else relative to the parent of the
    path it was found under (``given``): ``/srv/manual/a.html`` named as ``/srv/manual`` from
    elsewhere becomes ``manual/a.html``."""
    file = file.resolve()
    for base in (root.resolve(), given.resolve().parent):
        try:
            return file.relative_to(base).as_posix()
        except ValueError:
            continue
    return file.name


def collect(paths: Iterable[Path], root: Path) -> list[tuple[str, Path]]:
    """(document id, file) for every file to ingest, sorted by id. A directory is walked
    (hidden files and folders skipped) for the supported extensions; a file named on its own is
    taken whatever its extension (an unsupported one is then reported as failed). Raises
    ``FileNotFoundError`` for a path that does not exist."""
    found: dict[str, Path] = {}
    for given in paths:
        if not given.exists():
            raise FileNotFoundError(f"no such file or directory: {given}")
        if given.is_file():
            found.setdefault(document_id(given, root, given), given)
            continue
        for file in sorted(given.rglob("*")):
            relative = file.relative_to(given).parts
            if any(part.startswith(".") for part in relative) or not file.is_file():
                continue
            if file.suffix.lower() in EXTENSIONS:
                found.setdefault(document_id(file, root, given), file)
    return sorted(found.items())
