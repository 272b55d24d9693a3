FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY monitor ./monitor
COPY alerts ./alerts
COPY migrations ./migrations
RUN pip install --no-cache-dir .
USER nobody
ENTRYPOINT []
CMD ["specwatch", "run", "--config", "/etc/specwatch/specwatch.yaml"]
