#!/usr/bin/env bash
# Sets up a fresh machine and runs the main job: installs the wasm32-wasip2 target,
# builds the host and every guest component, and validates the reference provider
# with `wasm-ccm check`.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/build-guests.sh
cargo build --locked
target/debug/wasm-ccm check target/wasm32-wasip2/release/reference_provider.wasm
