# traintrace image for the compose `pipeline` profile (see docker-compose.yml).
FROM python:3.11-slim
ENV PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
# only what the package needs, so the local .venv never enters the image
COPY pyproject.toml setup.py MANIFEST.in README.md* ./
COPY streams ./streams
COPY traintrace ./traintrace
COPY schemas ./schemas
# the processor's packages (Faust, RocksDB, the worker's default table store, --store rocksdb);
# the installed package carries its Avro schemas (schemas/ mapped into it by setup.py)
RUN pip install ".[worker]"
# in a container the HTTP views must bind every interface to be reachable through a published
# port; the worker's tables live on a volume
ENV TRAINTRACE_WEB_HOST=0.0.0.0 TRAINTRACE_WEB_PORT=6066 TRAINTRACE_WORKER_DIR=/data/worker
VOLUME ["/data"]
EXPOSE 6066
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=6 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health' % os.environ.get('TRAINTRACE_WEB_PORT', '6066'), timeout=4)"]
CMD ["traintrace", "worker"]
