"""``deja corpus``: ingest, list and remove the documents of a *running* gateway's corpora
through its admin API (``/admin/corpora/…``). ``ingest`` sends small files in groups (one
``POST`` of up to ``BATCH_FILES`` files, so the gateway embeds and writes their chunks together)
and a large file on its own (``PUT``); a group the gateway refuses as a whole is sent again file
by file, so one bad file never stops the others.

Exit codes as for the other admin commands (:mod:`app.cli.support`): 0 ok, 1 the gateway
answered with an error or, for ``ingest``, at least one file failed (each is named with its
reason), 2 usage error, 3 gateway unreachable, 4 admin key rejected.
"""

from __future__ import annotations

import base64
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import click

from app.cli.support import (
    CONTEXT,
    EXIT_API_ERROR,
    AdminError,
    Api,
    AuthError,
    RefusedError,
    UnreachableError,
    api_options,
    bad_shape,
    table,
    truncate,
)
from deja.corpus.files import collect, content_type_for, read_document, shown
from deja.corpus.names import CORPUS_NAME
from deja.corpus.parsing.base import EXTENSIONS

__all__ = ["corpus_group"]

#: Ingesting embeds on the gateway's CPU: a large PDF takes a while.
INGEST_TIMEOUT = 300.0
#: Files above which a progress bar is shown.
PROGRESS_MIN_FILES = 2
#: A group of small files sent in one request: at most this many files, each at most
#: ``BATCH_FILE_BYTES`` and ``BATCH_BYTES`` in all (a gateway takes a request body as large as
#: one ``corpus_max_file_bytes`` file, 20 MiB by default); a larger file goes on its own.
BATCH_FILES = 32
BATCH_FILE_BYTES = 256 * 1024
BATCH_BYTES = 2 * 1024 * 1024


def _check_corpus(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not CORPUS_NAME.fullmatch(value):
        raise click.BadParameter("1-64 letters, digits, '.', '_' or '-'")
    return value


_CORPUS = click.option(
    "--corpus", required=True, callback=_check_corpus, help="The corpus name, e.g. deja-docs."
)
_TENANT = click.option(
    "--tenant", default="default", show_default=True, help="The tenant that owns the corpus."
)


def _document_path(corpus: str, document: str) -> str:
    return f"/admin/corpora/{quote(corpus)}/documents/{quote(document, safe='/')}"


@click.group("corpus", context_settings=CONTEXT)
def corpus_group() -> None:
    """Manage the document corpora that RAG requests retrieve from.

    Every command talks to a running gateway's admin API: set DEJA_ADMIN_URL and
    DEJA_ADMIN_KEY (or pass --url/--key). A corpus belongs to one tenant; documents are
    identified by their path relative to the ingest root (docs/guide.md).
    """


@corpus_group.command(
    "ingest", context_settings={**CONTEXT, "default_map": {"timeout": INGEST_TIMEOUT}}
)
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@_CORPUS
@_TENANT
@click.option(
    "--root",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="Document ids are paths relative to this folder (a file outside it: relative to "
    "the parent of the PATH it was found under).",
)
@click.option("--meta", multiple=True, help="key=value metadata for every file (repeatable).")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Write nothing: report what would be added or updated and how many cached answers "
    "that would invalidate (provenance, and DEJA_RAG_INVALIDATE_NEAR when set).",
)
@click.option(
    "--follow-symlinks",
    is_flag=True,
    help="Ingest what symbolic links point to even outside the folders named (by default such "
    "a link is refused and named).",
)
@api_options
def ingest(
    paths: tuple[Path, ...],
    corpus: str,
    tenant: str,
    root: Path,
    meta: tuple[str, ...],
    dry_run: bool,
    follow_symlinks: bool,
    url: str,
    key: str,
    as_json: bool,
    timeout: float,
) -> None:
    """Add or update the files under PATH… (folders are walked for .md, .markdown, .txt,
    .html, .htm and .pdf files). Unchanged files are skipped; a changed file gets a new
    version and the answers cached from the old one are invalidated. A file that cannot
    be ingested is named with its reason, and the exit code is then 1; so is a file refused
    before reading (a link out of the tree, a name that is not valid UTF-8)."""
    api = Api(url, key, timeout, as_json)
    found = collect(paths, root, follow_symlinks=follow_symlinks)
    lines: list[dict[str, Any]] = [
        {"document": name, "status": "failed", "reason": reason} for name, reason in found.refused
    ]
    files = found.files
    if not files and not lines:
        kinds = ", ".join(sorted(EXTENSIONS))
        named = ", ".join(shown(path) for path in paths)
        raise RefusedError(f"no files to ingest ({kinds}) under {named}")
    with _progress(len(files), show=len(files) >= PROGRESS_MIN_FILES and not as_json) as done:
        for batch in _batches(files):
            lines += _send_batch(api, corpus, tenant, batch, list(meta), dry_run, follow_symlinks)
            done(batch)
    if not api.emit({"tenant": tenant, "corpus": corpus, "files": lines}):
        _print_ingest(lines, corpus, dry_run)
    if any(line["status"] == "failed" for line in lines):
        sys.exit(EXIT_API_ERROR)


Batch = list[tuple[str, Path]]


@contextmanager
def _progress(total: int, *, show: bool) -> Iterator[Callable[[Batch], None]]:
    """A callback that moves the bar past a batch of files (a no-op without a bar)."""
    if not show:
        yield lambda batch: None
        return
    with click.progressbar(
        length=total,
        label=f"ingesting {total} files",
        file=sys.stderr,
        show_pos=True,
        item_show_func=lambda item: item,
    ) as bar:
        yield lambda batch: bar.update(len(batch), batch[-1][0])


def _size(file: Path) -> int:
    try:
        return file.stat().st_size
    except OSError:
        return BATCH_FILE_BYTES + 1  # sent on its own: the read names the error


def _batches(files: Batch) -> Iterator[Batch]:
    """``files`` in order, small ones in groups of at most ``BATCH_FILES`` and ``BATCH_BYTES``,
    each larger one alone."""
    group: Batch = []
    total = 0
    for item in files:
        size = _size(item[1])
        if size > BATCH_FILE_BYTES:
            if group:
                yield group
            group, total = [], 0
            yield [item]
            continue
        if group and (len(group) == BATCH_FILES or total + size > BATCH_BYTES):
            yield group
            group, total = [], 0
        group.append(item)
        total += size
    if group:
        yield group


def _send_batch(
    api: Api,
    corpus: str,
    tenant: str,
    batch: Batch,
    meta: list[str],
    dry_run: bool,
    follow_symlinks: bool,
) -> list[dict[str, Any]]:
    """The batch's report lines in order: one ``POST`` of the files that could be read, or
    (one file, or a gateway that refused the request as a whole) one ``PUT`` per file."""
    if len(batch) == 1:
        return [_send(api, corpus, tenant, *batch[0], meta, dry_run, follow_symlinks)]
    lines: dict[int, dict[str, Any]] = {}
    entries: list[dict[str, Any]] = []
    for i, (document, file) in enumerate(batch):
        try:
            data = read_document(file, follow_symlinks=follow_symlinks)
        except OSError as exc:
            reason = f"cannot read {file}: {exc.strerror or exc}"
            lines[i] = {"document": document, "status": "failed", "reason": reason}
            continue
        encoded = base64.b64encode(data).decode()
        entries.append(
            {"document": document, "content_type": content_type_for(file), "data": encoded}
        )
    try:
        sent = api.call(
            "POST",
            f"/admin/corpora/{quote(corpus)}/documents",
            params={"tenant": tenant, "meta": meta, **({"dry_run": "true"} if dry_run else {})},
            body={"files": entries},
        )
        answered = iter(sent["files"])
        return [lines[i] if i in lines else next(answered) for i in range(len(batch))]
    except (UnreachableError, AuthError):
        raise
    except (AdminError, KeyError, TypeError, StopIteration):
        return [_send(api, corpus, tenant, d, f, meta, dry_run, follow_symlinks) for d, f in batch]


def _send(
    api: Api,
    corpus: str,
    tenant: str,
    document: str,
    file: Path,
    meta: list[str],
    dry_run: bool = False,
    follow_symlinks: bool = False,
) -> dict[str, Any]:
    """One file's report; a file the gateway refused (or that cannot be read) is a failed
    line, while an unreachable gateway or a rejected key stops the whole run."""
    try:
        data = read_document(file, follow_symlinks=follow_symlinks)
        report: dict[str, Any] = api.call(
            "PUT",
            _document_path(corpus, document),
            params={"tenant": tenant, "meta": meta, **({"dry_run": "true"} if dry_run else {})},
            content=data,
            content_type=content_type_for(file),
        )
        return report
    except (UnreachableError, AuthError):
        raise
    except AdminError as exc:
        reason = exc.message.removeprefix(f"{document}: ")
    except OSError as exc:
        reason = f"cannot read {file}: {exc.strerror or exc}"
    return {"document": document, "status": "failed", "reason": reason}


def _print_ingest(lines: list[dict[str, Any]], corpus: str, dry_run: bool = False) -> None:
    counts = dict.fromkeys(("added", "updated", "unchanged", "failed"), 0)
    chunks = invalidated = 0
    try:
        for line in lines:
            status = line["status"]
            counts[status] += 1
            document = line["document"]
            if status == "failed":
                click.echo(f"failed     {document}: {line['reason']}", err=True)
                continue
            invalidated += int(line.get("invalidated") or 0)
            if status == "added":
                chunks += int(line["chunks"])
                click.echo(f"added      {document} (v{line['version']}, {line['chunks']} chunks)")
            elif status == "updated":
                chunks += int(line["chunks"])
                click.echo(
                    f"updated    {document} (v{line['old_version']} -> v{line['version']}, "
                    f"{line['chunks']} chunks, {line.get('invalidated', 0)} answers invalidated)"
                )
            if line.get("invalidation_error"):
                click.echo(
                    f"WARNING    {document}: cached answers NOT invalidated: "
                    f"{line['invalidation_error']}",
                    err=True,
                )
    except (KeyError, TypeError, ValueError) as exc:
        bad_shape(exc)
    summary = ", ".join(f"{n} {status}" for status, n in counts.items())
    if dry_run:
        click.echo(
            f"{corpus} (dry run, nothing written): {len(lines)} files ({summary}); {chunks} "
            f"chunks would be written, {invalidated} cached answers would be invalidated"
        )
        return
    click.echo(
        f"{corpus}: {len(lines)} files ({summary}); {chunks} chunks written, "
        f"{invalidated} cached answers invalidated"
    )


@corpus_group.command("rm", context_settings=CONTEXT)
@click.argument("document")
@_CORPUS
@_TENANT
@api_options
def remove(
    document: str, corpus: str, tenant: str, url: str, key: str, as_json: bool, timeout: float
) -> None:
    """Remove DOCUMENT (its id, e.g. docs/guide.md) from the corpus, and the cached answers
    built from it."""
    api = Api(url, key, timeout, as_json)
    data = api.call("DELETE", _document_path(corpus, document), params={"tenant": tenant})
    api.show(data, _removed_text)


def _removed_text(data: Any) -> str:
    return (
        f"removed {data['document']} (v{data['version']}, {data['chunks']} chunks) from "
        f"{data['corpus']}; {data['invalidated']} cached answers invalidated"
    )


@corpus_group.command("ls", context_settings=CONTEXT)
@click.option("--corpus", callback=_check_corpus, help="List this corpus's documents.")
@_TENANT
@api_options
def list_command(
    corpus: str | None, tenant: str, url: str, key: str, as_json: bool, timeout: float
) -> None:
    """List the tenant's corpora, or with --corpus the documents of one."""
    api = Api(url, key, timeout, as_json)
    if corpus is None:
        data = api.call("GET", "/admin/corpora", params={"tenant": tenant})
        api.show(data, lambda d: _corpora_text(d, tenant))
        return
    data = api.call("GET", f"/admin/corpora/{quote(corpus)}/documents", params={"tenant": tenant})
    api.show(data, _documents_text)


def _corpora_text(data: Any, tenant: str) -> str:
    rows = [[c["name"], c["documents"], c["chunks"]] for c in data["corpora"]]
    if not rows:
        return f"tenant {tenant} has no corpora"
    return table(["corpus", "documents", "chunks"], rows, right="12")


def _documents_text(data: Any) -> str:
    rows = [
        [d["document"], d["version"], d["chunks"], d["format"], truncate(d["title"], 50)]
        for d in data["documents"]
    ]
    return table(["document", "version", "chunks", "format", "title"], rows, right="12")
