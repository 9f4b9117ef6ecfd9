# traintrace image for the compose `pipeline` profile (see docker-compose.yml).
FROM python:3.11-slim
ENV PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
# only what the package needs, so the local .venv never enters the image
COPY pyproject.toml README.md* ./
COPY streams ./streams
COPY schemas ./schemas
ENV TRAINTRACE_SCHEMAS_DIR=/app/schemas
RUN pip install .
CMD ["traintrace", "worker"]
