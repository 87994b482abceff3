#!/usr/bin/env bash
# Builds every guest component (the reference provider and the test fixtures) once,
# for wasm32-wasip2, into target/wasm32-wasip2/release/. Tests and benchmarks reuse them.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
    rustup target add wasm32-wasip2
fi

packages=(reference-provider aws-provider openstack-provider huaweicloud-provider k3s-provider)
# Every fixture; guests/fixtures/multi-memory's component is assembled by its build
# script (several core modules with a memory each, composed into one component) and
# written to the same directory.
for dir in guests/fixtures/*/; do
    packages+=("$(sed -n 's/^name = "\(.*\)"/\1/p' "$dir/Cargo.toml" | head -n1)")
done

args=()
for p in "${packages[@]}"; do args+=(-p "$p"); done
# The components tests load and deploy/ ships are compiled by rustc, as users build
# them, even where CI compiles the host's crates through Clippy (.ci/run).
unset RUSTC_WORKSPACE_WRAPPER
cargo build --locked --target wasm32-wasip2 --release "${args[@]}"

# The reference provider is also what deploy/ packages into its providers ConfigMap.
cp target/wasm32-wasip2/release/reference_provider.wasm deploy/providers/simcloud.wasm
# And the AWS provider for deploy/aws/.
cp target/wasm32-wasip2/release/aws_provider.wasm deploy/aws/providers/aws.wasm
# And the OpenStack provider for deploy/openstack/.
cp target/wasm32-wasip2/release/openstack_provider.wasm deploy/openstack/providers/openstack.wasm
# And the Huawei Cloud provider for deploy/huaweicloud/.
cp target/wasm32-wasip2/release/huaweicloud_provider.wasm deploy/huaweicloud/providers/huaweicloud.wasm
# And the K3s provider for deploy/k3s/.
cp target/wasm32-wasip2/release/k3s_provider.wasm deploy/k3s/providers/k3s.wasm
