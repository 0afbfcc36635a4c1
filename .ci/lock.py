#!/usr/bin/env python3
"""The lockfile: every runtime and test dependency of deja pinned with hashes.

``requirements.lock`` is compiled from ``pyproject.toml`` (``[project] dependencies`` and the
``dev`` extra; never ``train`` or ``st``, which bring PyTorch) by ``uv pip compile
--generate-hashes``, and installs with plain pip (``pip install --require-hashes -r
requirements.lock``, then ``pip install --no-deps -e .``), which is what ``make run`` and
``make test`` do. Its first lines record a sha256 of the dependency lists it was compiled
from, so CI can tell that ``pyproject.toml`` changed without the lock.

    python .ci/lock.py --uv PATH/uv [--upgrade]   refresh it (``make lock``): pins kept
                                                  unless --upgrade, new dependencies added
    python .ci/lock.py --check                    exit 1 when pyproject.toml and the lock
                                                  disagree (``make test`` runs it)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
LOCK = ROOT / "requirements.lock"
EXTRAS = ("dev",)
HEADER = "# deja-lock-input: sha256="
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", re.MULTILINE)
NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def inputs() -> list[str]:
    """The requirement strings the lock is compiled from, in pyproject order."""
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    extras = project.get("optional-dependencies", {})
    return list(project["dependencies"]) + [req for extra in EXTRAS for req in extras[extra]]


def input_hash() -> str:
    return hashlib.sha256(json.dumps(inputs()).encode()).hexdigest()


def lock(uv: str, upgrade: bool) -> None:
    command = [
        uv,
        "pip",
        "compile",
        str(PYPROJECT),
        *(f"--extra={extra}" for extra in EXTRAS),
        "--generate-hashes",
        "--python-version=3.11",
        "--no-header",
        "--quiet",
        f"--output-file={LOCK}",
    ]
    if upgrade:
        command.append("--upgrade")
    subprocess.run(command, check=True, cwd=ROOT)
    body = LOCK.read_text()
    header = (
        f"{HEADER}{input_hash()}\n"
        "# Compiled from pyproject.toml (dependencies + the dev extra) by `make lock`\n"
        "# (uv pip compile --generate-hashes). Do not edit: change pyproject.toml, re-run it.\n"
    )
    LOCK.write_text(header + body)
    print(f"{LOCK.name}: {len(PIN.findall(body))} pins")


def _satisfies(req: str, version: str) -> bool:
    """Whether ``version`` meets ``req``'s specifier (True where ``packaging``, a test
    dependency, is not importable: the input hash still catches any change)."""
    try:
        from packaging.requirements import Requirement
    except ImportError:
        return True
    return Requirement(req).specifier.contains(version, prereleases=True)


def check() -> int:
    """Problems with the lock against pyproject.toml, printed; the exit code."""
    if not LOCK.exists():
        print(f"{LOCK.name} is missing: run `make lock`")
        return 1
    text = LOCK.read_text()
    problems = []
    recorded = text.split("\n", 1)[0].removeprefix(HEADER)
    if recorded != input_hash():
        problems.append("pyproject.toml's dependencies changed since the lock was compiled")
    pins = {_canonical(name): version for name, version in PIN.findall(text)}
    for req in inputs():
        match = NAME.match(req)
        name = _canonical(match.group(1)) if match else req
        if name not in pins:
            problems.append(f"{req!r} is not pinned in {LOCK.name}")
        elif not _satisfies(req, pins[name]):
            problems.append(f"{req!r} is not met by the pinned {name}=={pins[name]}")
    for line in problems:
        print(f"lock check: {line}")
    if problems:
        print("run `make lock` and commit requirements.lock")
        return 1
    print(f"lock check: {LOCK.name} matches pyproject.toml ({len(pins)} pins)")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--uv", default="uv")
    parser.add_argument("--upgrade", action="store_true")
    args = parser.parse_args()
    if args.check:
        return check()
    lock(args.uv, args.upgrade)
    return check()


if __name__ == "__main__":
    sys.exit(main())
