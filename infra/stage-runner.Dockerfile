# The stage-runner Lambda function as a container image: reconstruction stages run COLMAP
# as a subprocess, and a zip package (one `bootstrap` on provided.al2023) has none.
#
# `sam build` builds it from infra/template.yaml (Metadata of StageRunnerFunction), for the
# stack's Architecture; `sam deploy --resolve-image-repos` pushes it to ECR.
#
# The image is Debian bookworm with Debian's COLMAP 3.8 (CPU: Lambda has no GPU). The
# template's WorkerColmapVersion must name the same version for the Batch worker image,
# because a job pins one COLMAP version for all its stages.
#
# Lambda runs any image whose entrypoint speaks the Runtime API; the stage-runner binary
# does (lambda_runtime), so no runtime interface client is installed.

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p tessera-fn-stage-runner \
 && strip target/release/stage-runner \
 && cp target/release/stage-runner /bootstrap

FROM debian:bookworm-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends colmap ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /bootstrap /var/task/bootstrap
# A function's file system is read-only except /tmp.
WORKDIR /tmp
ENTRYPOINT ["/var/task/bootstrap"]
