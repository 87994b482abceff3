#!/usr/bin/env bash
# Sets up a fresh machine and runs the main job: installs the wasm32-wasip2 target,
# builds the host and every guest component, validates the reference provider with
# `wasm-ccm check`, then starts `wasm-ccm-playground` (a Kubernetes API server double,
# the simulated cloud and the reference provider on this machine) until Ctrl-C.
# Extra arguments go to the playground, e.g. `scripts/main.sh --nodes 5`.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/build-guests.sh
cargo build --locked
target/debug/wasm-ccm check target/wasm32-wasip2/release/reference_provider.wasm
echo
exec target/debug/wasm-ccm-playground "$@"
