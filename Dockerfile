# One image for every role: the chart runs it as `operator` and `gateway`, the operator runs
# it as `worker` (AGENTFLEET_WORKER_IMAGE defaults to it).
#
#   podman build -t agentfleet .        # or: docker build -t agentfleet .
#
# Both bases are build arguments, so a mirror or a local base can stand in for them:
#   --build-arg RUST_IMAGE=... --build-arg RUNTIME_IMAGE=...
#
# The pair must share a glibc: the binary links against the builder's glibc and needs at
# least that version at run time (bookworm's 2.36 on both sides here).
ARG RUST_IMAGE=docker.io/library/rust:1.95-slim-bookworm
# distroless/cc: glibc, libgcc_s (Rust's unwinder), the CA bundle and a nonroot user — all the
# release binary needs. It talks TLS through rustls with the system's roots
# (rustls-platform-verifier reads /etc/ssl/certs), carries its own time zone database (jiff's
# bundled tzdb) and never runs a shell or a helper program, so no shell, package manager or
# tzdata is shipped: less to scan, less to exploit. `:nonroot` already runs as 65532; the
# USER below says so for any other base. debian:bookworm-slim with ca-certificates works too.
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM ${RUST_IMAGE} AS build
WORKDIR /src
# Dependencies first, against a stub crate, so a change to src/ rebuilds only agentfleet
# itself. bench/ is copied because Cargo.toml names its files.
COPY Cargo.toml Cargo.lock ./
COPY bench bench
RUN mkdir src \
 && echo 'fn main() {}' > src/main.rs \
 && touch src/lib.rs \
 && cargo build --release --locked --bin agentfleet \
 && rm -rf src
COPY src src
# COPY keeps the context's mtimes, which may be older than the stub's build: touch the crate
# roots so cargo rebuilds agentfleet rather than keep the stub.
RUN touch src/main.rs src/lib.rs \
 && cargo build --release --locked --bin agentfleet \
 && ./target/release/agentfleet --version

FROM ${RUNTIME_IMAGE}
LABEL org.opencontainers.image.title="agentfleet" \
      org.opencontainers.image.description="A Kubernetes operator that runs fleets of living LLM agents" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/agentfleet/agentfleet"
COPY --from=build /src/target/release/agentfleet /usr/local/bin/agentfleet
# The chart's and the worker Pods' runAsUser. Numeric, so Kubernetes can check runAsNonRoot
# without reading /etc/passwd.
USER 65532:65532
# Read-only root filesystem: agentfleet writes no file at run time (temp files appear only in
# its tests), so it needs neither a writable HOME nor TMPDIR. Its inputs are mounted read-only
# (/etc/agentfleet/...), its state lives in Redis; the worker Pods also get an emptyDir /tmp.
ENTRYPOINT ["/usr/local/bin/agentfleet"]
