# The Batch worker container: a CUDA build of COLMAP plus the `tessera` binary from this
# workspace. Batch runs `tessera stage --task <id>` (the job definition's command), which
# claims, heartbeats, fences and completes one heavy task against the AWS adapters.
#
#   docker build -f infra/worker.Dockerfile \
#     --build-arg COLMAP_IMAGE=colmap/colmap@sha256:<digest of the CUDA image you tested> \
#     -t tessera-worker .
#   docker tag tessera-worker <account>.dkr.ecr.<region>.amazonaws.com/tessera-worker:<tag>
#   docker push …   then deploy with WorkerImage=<that image>
#
# The runtime image is COLMAP's own CUDA image (Ubuntu 22.04, glibc 2.35). The binary is
# built on Debian bullseye (glibc 2.31) so that it runs there unchanged.

# No default: a floating tag (`latest`) would change the engine under a deployed stack
# without anyone noticing (its version is in every job fingerprint). Pin by digest. It
# must hold COLMAP 3.8, the version of the stage-runner image (infra/stage-runner.Dockerfile)
# that runs the same jobs' small stages; the stack's WorkerColmapVersion says so.
ARG COLMAP_IMAGE

# x86_64, the architecture the Batch compute environments' instance types (g5, c6i, m6i)
# have, whatever machine builds the image.
FROM --platform=linux/amd64 rust:1.95-bullseye AS build
WORKDIR /src
COPY . .
# Without the `heif` feature: the worker runs reconstruction stages, which need no HEIC
# decoder, and a build without libheif needs neither cmake nor libde265 here nor
# libde265 in the runtime image; an HEIC it is handed is refused by name. Every shared
# library this binary needs is checked against the runtime image by
# infra/check_worker_libs.py (infra/worker-runtime-libs.txt).
RUN cargo build --release --locked -p tessera-cli --no-default-features \
 && strip target/release/tessera \
 && cp target/release/tessera /tessera

FROM --platform=linux/amd64 ${COLMAP_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /tessera /usr/local/bin/tessera
# The COLMAP backend reads COLMAP's banner ("with CUDA") and runs SIFT extraction and
# matching on the GPU where one is present (the CPU queue runs this image too).
ENV TESSERA_COLMAP=colmap \
    TESSERA_LOG=info \
    TESSERA_LOG_JSON=1
WORKDIR /tmp
ENTRYPOINT ["tessera"]
CMD ["--help"]
