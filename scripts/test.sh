#!/usr/bin/env bash
# Runs every test: builds the guest components once, then the host workspace's unit
# and integration tests (which load those components and start real servers on
# 127.0.0.1).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/build-guests.sh
# tests/rbac.rs renders deploy/ with `kubectl kustomize`.
source scripts/ensure-kubectl.sh
# tests/aws/ runs the AWS provider against moto's server on 127.0.0.1.
source scripts/ensure-moto.sh
# tests/keystone.rs runs the real Keystone on 127.0.0.1.
source scripts/ensure-keystone.sh
# tests/huaweicloud/ re-signs what the host signed with Huawei Cloud's own SDK, and
# drives tests/huaweicloud-double with its official clients.
source scripts/ensure-huaweicloud-sdk.sh
# tests/monitoring.rs checks the alerting rules with promtool and scrapes the secure
# port with prometheus (both from Debian's prometheus package).
source scripts/ensure-promtool.sh
# The host binaries the integration tests run (wasm-ccm, sim-cloud).
cargo build --locked
# tests/real_apiserver.rs runs kube-apiserver and etcd on 127.0.0.1, built from their Go
# modules (once; reused from target/kube/bin/).
source scripts/ensure-kube-apiserver.sh
# tests/occm_migration.rs and tests/aws_oracle/ run the upstream occm and
# cloud-provider-aws, built from their Go modules (once; reused from target/kube/bin/).
source scripts/ensure-upstream-ccm.sh
# tests/helm.rs lints and renders deploy/helm/wasm-ccm with helm, built from its Go
# module (once; reused from target/kube/bin/).
source scripts/ensure-go-tools.sh
# The SDK's and the providers' own unit tests and doc examples, natively (mock transport).
cargo test --locked -p wasm-ccm-guest -p reference-provider -p aws-provider -p openstack-provider -p huaweicloud-provider -p k3s-provider -- "$@"
# Every test binary of the workspace and the doc tests, a few binaries at a time (most
# wait on servers and processes more than they compute; WASM_CCM_TEST_JOBS sets how
# many, scripts/run-tests.py says how).
python3 scripts/run-tests.py -- "$@"
# The bench regression check, at a small size in the test profile: fails when a call
# through the sandbox and the broker costs more than 6 times its native side (a large
# ratio regression, never an absolute time; tests/benches/README.md).
if [ $# -eq 0 ]; then
    BENCH_SIZE=small BENCH_MAX_RATIO=6 cargo test --locked -p wasm-ccm-tests --bench provider_calls
fi
