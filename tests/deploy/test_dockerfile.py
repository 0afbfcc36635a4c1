"""The root Dockerfile and .dockerignore, read as text (no Docker engine where tests run)."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field

from config.settings import Settings
from tests.deploy.helpers import ROOT, SETTINGS_ENV

DOCKERFILE = ROOT / "Dockerfile"


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]

    def env(self) -> dict[str, str]:
        values: dict[str, str] = {}
        for args in self.all("ENV"):
            for token in shlex.split(args):
                key, _, value = token.partition("=")
                values[key] = value
        return values


def stages() -> list[Stage]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())  # join continuation lines
    result: list[Stage] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            parts = args.split()
            result.append(Stage(parts[0], parts[2] if len(parts) > 2 else None))
        elif result:
            result[-1].instructions.append((keyword, args.strip()))
    return result


def test_multi_stage_with_a_slim_python_runtime() -> None:
    all_stages = stages()
    assert len(all_stages) >= 2
    builder, runtime = all_stages[0], all_stages[-1]
    assert builder.name == "builder"
    text = DOCKERFILE.read_text()
    assert re.search(r"ARG PYTHON_IMAGE=python:3\.11-slim", text)
    assert runtime.base == builder.base == "${PYTHON_IMAGE}"
    assert any("--from=builder" in args for args in runtime.all("COPY"))
    assert any("pip install" in args and "." in args.split() for args in builder.all("RUN"))
    assert any("python -m venv" in args for args in builder.all("RUN"))


def test_runtime_runs_as_a_non_root_user() -> None:
    runtime = stages()[-1]
    (user,) = runtime.all("USER")
    uid = user.split(":")[0]
    assert uid not in ("root", "0")
    assert uid.isdigit(), "a numeric UID lets Kubernetes verify runAsNonRoot"
    # USER comes after everything that needs root in the stage.
    keywords = [kw for kw, _ in runtime.instructions]
    assert "RUN" not in keywords[keywords.index("USER") :]


def test_embedding_model_is_baked_into_the_model_dir() -> None:
    builder, runtime = stages()[0], stages()[-1]
    model_dir = runtime.env()["DEJA_MODEL_DIR"]
    bake = [args for args in builder.all("RUN") if "load_onnx_embedder" in args]
    assert len(bake) == 1
    assert f"Path('{model_dir}')" in bake[0]
    assert "DYNINT8_ID" in bake[0], "the build must fail if the re-quantised model is not used"
    copied = [args for args in runtime.all("COPY") if "--from=builder" in args]
    assert any(model_dir.startswith(args.split()[-1]) for args in copied)


def test_runtime_environment_ports_and_command() -> None:
    runtime = stages()[-1]
    env = runtime.env()
    assert env["DEJA_HOST"] == "0.0.0.0"
    assert env["DEJA_DATA_DIR"] == "/var/lib/deja"
    assert {k for k in env if k.startswith("DEJA_")} <= SETTINGS_ENV
    port = Settings.model_fields["port"].default
    assert env.get("DEJA_PORT", str(port)) == str(port)
    assert runtime.all("EXPOSE") == [str(port)]
    (cmd,) = runtime.all("CMD")
    assert json.loads(cmd) == ["deja", "serve"]


def test_healthcheck_probes_healthz_with_python() -> None:
    runtime = stages()[-1]
    (check,) = runtime.all("HEALTHCHECK")
    options, _, command = check.partition("CMD ")
    assert "--interval" in options and "--timeout" in options
    argv = json.loads(command)
    assert argv[:2] == ["python", "-c"]
    assert "/healthz" in argv[2] and "DEJA_PORT" in argv[2]
    assert "curl" not in check


def test_copied_sources_exist() -> None:
    for stage in stages():
        for args in stage.all("COPY"):
            if "--from=" in args:
                continue
            for source in args.split()[:-1]:
                assert (ROOT / source).exists(), source


def test_dockerignore_keeps_the_context_small() -> None:
    entries = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    for required in (
        ".venv",
        ".git",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        "bench/results",
    ):
        assert required in entries
    copied = {
        source
        for stage in stages()
        for args in stage.all("COPY")
        if "--from=" not in args
        for source in args.split()[:-1]
    }
    assert not copied & entries, "the Dockerfile copies something .dockerignore excludes"
