# Minimal image; the deploy issue replaces it with a multi-stage, non-root build.
FROM python:3.11-slim
WORKDIR /srv/deja
COPY pyproject.toml README.md ./
COPY app app
COPY middleware middleware
COPY config config
RUN pip install --no-cache-dir .
ENV DEJA_HOST=0.0.0.0
EXPOSE 8080
CMD ["deja", "serve"]
