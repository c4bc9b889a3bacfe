# netclaw in a container: `docker build -t netclaw .` then (see docs/deploy.md)
#   docker run -d --name netclaw -p 127.0.0.1:5199:5199 -v netclaw-data:/var/lib/netclaw \
#     --add-host=host.docker.internal:host-gateway \
#     -e NETCLAW_PROVIDERS__LOCAL__BASE_URL=http://host.docker.internal:11434/v1 netclaw
# State (journal, token, workspace) lives in the volume; the control token is
# /var/lib/netclaw/control.token unless NETCLAW_GATEWAY__CONTROL_TOKEN_ENV names a variable.

ARG PYTHON_IMAGE=python:3.11-slim

# -- build: a virtualenv with netclaw and the Slack and Discord extras ------------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/netclaw
COPY pyproject.toml README.md /src/
COPY netclaw /src/netclaw
COPY adapters /src/adapters
COPY migrations /src/migrations
COPY skills /src/skills
RUN /opt/netclaw/bin/pip install '/src[slack,discord]' \
 && find /opt/netclaw -name '__pycache__' -prune -exec rm -rf {} + \
 && /opt/netclaw/bin/python -m compileall -q /opt/netclaw/lib

# -- run: the venv on a clean base, as an unprivileged user -----------------------------------
FROM ${PYTHON_IMAGE}
RUN groupadd --system --gid 10001 netclaw \
 && useradd --system --uid 10001 --gid netclaw --home-dir /var/lib/netclaw --shell /usr/sbin/nologin netclaw \
 && install -d -o netclaw -g netclaw -m 0700 /var/lib/netclaw
COPY --from=build /opt/netclaw /opt/netclaw
ENV PATH=/opt/netclaw/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    NETCLAW_DATA_DIR=/var/lib/netclaw \
    NETCLAW_TOOLS__WORKSPACE_DIR=/var/lib/netclaw/workspace \
    NETCLAW_GATEWAY__HOST=0.0.0.0 \
    NETCLAW_GATEWAY__PORT=5199
USER netclaw
WORKDIR /var/lib/netclaw
VOLUME ["/var/lib/netclaw"]
EXPOSE 5199
# /healthz answers 503 while a channel, an MCP server, the journal or the provider is down.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('NETCLAW_GATEWAY__PORT', '5199'), timeout=4)"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["netclaw"]
CMD ["run"]
