#!/usr/bin/env bash
# Installs the Debian 12 packages DAR needs to build and test. Idempotent: installs only
# what is missing, so a second run costs one dpkg query.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config git
  libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libfmt-dev libspdlog-dev libabsl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  # clang's thread-safety analysis of the code that locks (make check-thread-safety): g++
  # ignores the ABSL_GUARDED_BY annotations; clang checks them. clang-tidy's bugprone and
  # performance checks (make check-tidy). python3 runs both. libclang-rt-14-dev: the libFuzzer,
  # ASan and UBSan runtimes clang links the fuzz targets with (make fuzz), only recommended by
  # clang's packages.
  clang clang-tidy python3 libclang-rt-14-dev
  # The real runtime (controller, agents, overlay, lab): gRPC over mutual TLS, OpenSSL for
  # certificates, libsodium for data-plane authenticators, Prometheus metrics, an HTTP server
  # for /healthz and metrics, iproute2 for namespaces and veths, iperf3 for the lab's traffic.
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libssl-dev openssl
  libsodium-dev prometheus-cpp-dev libcpp-httplib-dev iproute2 iperf3
  # Traffic engineering (`dar-sim loads --policy lp`, src/core/te_lp.h): GLPK's simplex solves
  # the LP optimum of multicommodity flow, the yardstick DAR is compared against on WANs.
  libglpk-dev
  # Training only (dar-train, src/train): LibTorch's C++ API. Everything else builds
  # and runs without it.
  libtorch-dev
  # The controller's web view (web/, docs/web-view.md): Node.js runs vite at build time (npm
  # installs web/node_modules from package-lock.json, below); Debian's chromium runs its
  # browser test (web/tests/view.mjs). npm is below too: a Node.js from elsewhere may bring
  # its own and conflict with Debian's package.
  nodejs chromium
  # High availability (docs/high-availability.md): the controller's replicas elect a leader
  # and keep the operator's state in etcd, spoken to over its v3 gRPC API; its tests start a
  # real etcd.
  etcd-server
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ! command -v npm >/dev/null; then
  missing+=(npm)
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The web view's build tools and libraries, exactly as package-lock.json pins them; again only
# when it changed. The build and the controller download nothing.
web="$(cd "$(dirname "$0")/.." && pwd)/web"
if [ ! -d "$web/node_modules" ] || [ "$web/package-lock.json" -nt "$web/node_modules" ]; then
  echo "install-deps: npm ci --prefix web"
  npm ci --prefix "$web" --no-audit --no-fund --loglevel=error
  touch "$web/node_modules"
fi
