"""The lockfile (issue 19, finding 12): every runtime and test dependency pinned with hashes, the
pins being what this suite runs with, and a check that fails when pyproject.toml moves on
without the lock."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements.lock"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+) (?:;[^\\]*)?\\$", re.MULTILINE)


def check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(root / ".ci" / "lock.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_every_pin_has_hashes_and_is_what_the_suite_runs_with() -> None:
    text = LOCK.read_text()
    pins = PIN.findall(text)
    assert len(pins) > 50
    blocks = re.split(r"\n(?=[A-Za-z0-9])", text.split("\n", 3)[3])
    assert all("--hash=sha256:" in block for block in blocks), "a pin without a hash"
    assert "torch" not in {name.lower() for name, _ in pins}  # the train extra stays out
    for name, version in pins:
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue  # a marker-gated pin (e.g. async-timeout before Python 3.11.3)
        assert installed == version, f"{name}: lock {version}, installed {installed}"


def test_the_check_passes_here_and_fails_when_pyproject_moves_on(tmp_path: Path) -> None:
    done = check(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    (tmp_path / ".ci").mkdir()
    shutil.copy(ROOT / ".ci" / "lock.py", tmp_path / ".ci" / "lock.py")
    shutil.copy(LOCK, tmp_path / "requirements.lock")
    pyproject = (ROOT / "pyproject.toml").read_text()
    moved = pyproject.replace('  "orjson>=3.9",\n', '  "orjson>=3.9",\n  "pyfiglet>=1.0",\n', 1)
    assert moved != pyproject
    (tmp_path / "pyproject.toml").write_text(moved)
    failed = check(tmp_path)
    assert failed.returncode == 1
    assert "'pyfiglet>=1.0' is not pinned" in failed.stdout
    assert "changed since the lock was compiled" in failed.stdout
