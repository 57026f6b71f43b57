# The sluice server image: one static binary on distroless, run as nonroot.
#
#   docker build -t sluice .
#   docker run -d -p 6380:6380 -p 9380:9380 \
#     -e SLUICE_REQUIREPASS=a-long-random-secret -v sluice-data:/var/lib/sluice sluice
#
# Protected mode: with no password set, a node accepts loopback clients only,
# and in a container every client (even one on the same host, through a
# published port) comes from another address. Give the container
# SLUICE_REQUIREPASS (or an --acl-file), or start it with
# --protected-mode=false on a network you trust.
#
# Raft: the image leaves SLUICE_RAFT_ADDR at its loopback default, which is
# right for a single node. A cluster node needs an address its peers reach:
# Raft refuses 0.0.0.0, so set --raft-addr (or SLUICE_RAFT_ADDR) to the
# container's own IP address, as docker-compose.yml does.
#
# Settings come from flags after the image name, SLUICE_* variables or a
# --config file. The HEALTHCHECK finds the node through SLUICE_HTTP_ADDR:
# move the HTTP listener with that variable, not with --http-addr.

FROM golang:1.26-bookworm AS build
WORKDIR /src
ENV CGO_ENABLED=0
# Modules first, in their own layer: rebuilt only when go.mod or go.sum change.
# go.mod replaces the Go client's module and the protocol module with their
# folders (clients/go, protocol): go mod download reads their go.mod files.
COPY go.mod go.sum ./
COPY clients/go/go.mod clients/go/go.sum ./clients/go/
COPY protocol/go.mod ./protocol/
RUN go mod download && go mod verify
COPY . .
# VERSION, if given (--build-arg VERSION=1.2.3), is what `sluice version`,
# HELLO and INFO report; otherwise the version in the source.
ARG VERSION=""
# No BuildKit cache mount here: the image builds with the classic builder
# too (Debian's docker.io has no buildx); the module layer above is what a
# rebuild reuses.
RUN ldflags="-s -w"; \
    if [ -n "$VERSION" ]; then ldflags="$ldflags -X github.com/sluice-rl/sluice/server.Version=$VERSION"; fi; \
    go build -trimpath -ldflags "$ldflags" -o /out/sluice ./cmd/sluice
# The final image has no shell to mkdir with: make the data directory here
# and copy it with its owner (65532 is distroless' nonroot user).
RUN mkdir -p /out/data && chown 65532:65532 /out/data && chmod 0750 /out/data
# /bin/ratelimit, as envoyproxy/ratelimit's image has it: a link to sluice,
# which run under that name is the drop-in (docs/envoy.md). A Deployment of
# envoyproxy/ratelimit (command /bin/ratelimit) switches by its image alone.
RUN mkdir -p /out/bin && ln -s /usr/local/bin/sluice /out/bin/ratelimit

FROM gcr.io/distroless/static-debian12:nonroot
LABEL org.opencontainers.image.title="sluice" \
      org.opencontainers.image.description="Rate-limit server speaking the Redis protocol, with a budget tree replicated through Raft"
COPY --from=build /out/sluice /usr/local/bin/sluice
COPY --from=build /out/bin/ /bin/
COPY --from=build --chown=65532:65532 /out/data /var/lib/sluice
ENV SLUICE_RESP_ADDR=0.0.0.0:6380 \
    SLUICE_HTTP_ADDR=0.0.0.0:9380 \
    SLUICE_DATA_DIR=/var/lib/sluice \
    SLUICE_LOG_FORMAT=json
USER nonroot
VOLUME ["/var/lib/sluice"]
# RESP, Raft, HTTP (/metrics, /healthz, /readyz). Run as /bin/ratelimit,
# the node listens on envoyproxy/ratelimit's ports instead (HTTP 8080, gRPC
# 8081, debug 6070, from its PORT, GRPC_PORT and DEBUG_PORT).
EXPOSE 6380 7380 9380
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
    CMD ["/usr/local/bin/sluice", "healthcheck"]
# SIGTERM drains clients and hands over Raft leadership within
# --shutdown-timeout (10s by default): give `docker stop` a little longer (-t 15).
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/sluice"]
