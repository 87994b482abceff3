#!/usr/bin/env bash
# Builds the peers of the scale bench (tests/benches/scale.rs) into target/kube/bin/ from
# their Go modules (the Go module proxy):
#   kube-controller-manager  from k8s.io/kubernetes, the same version and scratch module
#                            as kube-apiserver (scripts/ensure-kube-apiserver.sh, run
#                            first), so the second build reuses Go's build cache;
#   kwok                     from sigs.k8s.io/kwok: fake Nodes kept alive with status
#                            heartbeats and Leases, as kubelets keep real ones.
# Sourced, it exports $KUBE_CONTROLLER_MANAGER and $KWOK (and, through
# ensure-kube-apiserver.sh, $KUBE_APISERVER and $ETCD). A binary is reused while its
# stamp file names the pinned version. Not needed by the tests; the bench skips without it.
set -euo pipefail
KWOK_VERSION=v0.8.0

_scale_main() {
    local root bin build go stamp
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    bin="$root/target/kube/bin"
    build="$root/target/kube-build"
    go="$(command -v go || true)"
    [[ -n "$go" ]] || go=/usr/local/go/bin/go
    if [[ ! -x "$go" ]]; then
        echo "ensure-scale-peers: no Go toolchain (go on PATH or /usr/local/go/bin/go)" >&2
        return 1
    fi
    export GOFLAGS="-mod=mod ${GOFLAGS:-}" CGO_ENABLED=0
    # The scratch module kube-apiserver was built in, under the same lock.
    exec 9>"$bin/.build.lock"
    flock 9
    local kubernetes
    kubernetes="$(cat "$bin/kube-apiserver.version")"
    stamp="$bin/kube-controller-manager.version"
    if [[ -x "$bin/kube-controller-manager" && "$(cat "$stamp" 2>/dev/null)" == "$kubernetes" ]]; then
        echo "kube-controller-manager: $bin/kube-controller-manager (built before)"
    else
        echo "building kube-controller-manager ($kubernetes) in $build/kube-apiserver"
        rm -f "$stamp"
        if ! (cd "$build/kube-apiserver" && "$go" build -trimpath -ldflags "-s -w" \
            -o "$bin/kube-controller-manager" k8s.io/kubernetes/cmd/kube-controller-manager); then
            echo "ensure-scale-peers: building kube-controller-manager failed" >&2
            return 1
        fi
        echo "$kubernetes" > "$stamp"
    fi

    stamp="$bin/kwok.version"
    if [[ -x "$bin/kwok" && "$(cat "$stamp" 2>/dev/null)" == "sigs.k8s.io/kwok $KWOK_VERSION" ]]; then
        echo "kwok $KWOK_VERSION: $bin/kwok (built before)"
    else
        echo "building kwok $KWOK_VERSION from the Go module sigs.k8s.io/kwok"
        local dir="$build/kwok"
        rm -rf "$dir" "$stamp"
        mkdir -p "$dir"
        printf 'module wasm-ccm.invalid/kwok-build\n\ngo 1.26.0\n\nrequire sigs.k8s.io/kwok %s\n' \
            "$KWOK_VERSION" > "$dir/go.mod"
        if ! (cd "$dir" && "$go" build -trimpath \
            -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION" \
            -o "$bin/kwok" sigs.k8s.io/kwok/cmd/kwok); then
            echo "ensure-scale-peers: building kwok $KWOK_VERSION failed (scratch module: $dir)" >&2
            return 1
        fi
        # The stages kwok needs (it refuses to start without): a Node made Ready at once,
        # then kept so with a status heartbeat and a Lease, as the project ships them.
        local module
        module="$(cd "$dir" && "$go" list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
        cat "$module/kustomize/stage/node/fast/node-initialize.yaml" \
            <(echo ---) \
            "$module/kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml" \
            > "$bin/kwok-node-stages.yaml"
        echo "sigs.k8s.io/kwok $KWOK_VERSION" > "$stamp"
        echo "kwok $KWOK_VERSION: $bin/kwok"
    fi
}

_scale_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/ensure-kube-apiserver.sh
source "$_scale_root/scripts/ensure-kube-apiserver.sh"
if [[ -z "${KUBE_CONTROLLER_MANAGER:-}" || -z "${KWOK:-}" || -z "${KWOK_STAGES:-}" ]]; then
    (_scale_main)
    export KUBE_CONTROLLER_MANAGER="$_scale_root/target/kube/bin/kube-controller-manager" \
        KWOK="$_scale_root/target/kube/bin/kwok" KWOK_STAGES="$_scale_root/target/kube/bin/kwok-node-stages.yaml"
fi
unset -f _scale_main
unset _scale_root
