#!/usr/bin/env bash
# Builds the pinned kube-apiserver (Go module k8s.io/kubernetes) and etcd (Go module
# go.etcd.io/etcd/server/v3, whose root package is etcd's main) into target/kube/bin/,
# from the Go module proxy, for the tests that run a real API server on 127.0.0.1.
# Each binary is reused while its stamp file names the pinned version; a clean build
# (module download and compile) takes about 13 minutes on 2 cores and leaves ~0.7 GB in
# the module cache and ~3 GB in Go's build cache. Run it, or source it
# (e.g. from scripts/test.sh): it then exports $KUBE_APISERVER and $ETCD. Skipped when
# both are already set.
#
# k8s.io/kubernetes replaces its staging modules (k8s.io/api, apimachinery, apiserver,
# client-go, ...) with ./staging/src/..., which a dependent module cannot see: our own
# scratch go.mod (target/kube-build/) pins each of them to the matching published
# v0.X.Y instead, taken from the module's own go.mod so none is missed.
set -euo pipefail
KUBERNETES_VERSION=v1.37.2
# etcd's 3.7 line is the one kube-apiserver 1.37's etcd client (go.etcd.io/etcd/client/v3 v3.7.0) is released with.
ETCD_VERSION=v3.7.3

_kube_main() {
    local root bin build go
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    bin="$root/target/kube/bin"
    build="$root/target/kube-build"
    go="$(command -v go || true)"
    [[ -n "$go" ]] || go=/usr/local/go/bin/go
    if [[ ! -x "$go" ]]; then
        echo "ensure-kube-apiserver: no Go toolchain (go on PATH or /usr/local/go/bin/go)" >&2
        return 1
    fi
    mkdir -p "$bin"
    # One build at a time: a second caller (CI starts one in the background) waits for
    # the first, then finds the binaries built.
    exec 9>"$bin/.build.lock"
    flock 9
    # The default module cache (~/go/pkg/mod); our scratch go.mod gets its go.sum here.
    export GOFLAGS="-mod=mod ${GOFLAGS:-}" CGO_ENABLED=0

    # kube-apiserver
    local stamp="$bin/kube-apiserver.version"
    if [[ -x "$bin/kube-apiserver" && "$(cat "$stamp" 2>/dev/null)" == "k8s.io/kubernetes $KUBERNETES_VERSION" ]]; then
        echo "kube-apiserver $KUBERNETES_VERSION: $bin/kube-apiserver (built before)"
    else
        echo "building kube-apiserver $KUBERNETES_VERSION from the Go module k8s.io/kubernetes (several minutes)"
        local dir="$build/kube-apiserver" json staging="v0.${KUBERNETES_VERSION#v1.}" modfile minor ldflags
        rm -rf "$dir" "$stamp"
        mkdir -p "$dir"
        if ! json="$(cd "$dir" && "$go" mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" 2>&1)" \
            || ! modfile="$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p' <<< "$json")" \
            || [[ ! -s "$modfile" ]]; then
            echo "ensure-kube-apiserver: could not fetch k8s.io/kubernetes $KUBERNETES_VERSION's go.mod from the Go module proxy:" >&2
            echo "$json" >&2
            return 1
        fi
        {
            echo "module wasm-ccm.invalid/kube-build"
            echo
            echo "go 1.26.0"
            echo
            echo "godebug default=go1.26"
            echo
            echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
            echo
            echo "replace ("
            # Every k8s.io module that k8s.io/kubernetes requires at v0.0.0 is a staging module.
            awk '$1 ~ /^k8s\.io\// && $2 == "v0.0.0" { print $1 }' "$modfile" | sort -u \
                | while read -r module; do printf '\t%s => %s %s\n' "$module" "$module" "$staging"; done
            echo ")"
        } > "$dir/go.mod"
        minor="${KUBERNETES_VERSION#v1.}"
        minor="${minor%%.*}"
        ldflags="-s -w"
        local pkg
        for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
            ldflags+=" -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
            ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
        done
        if ! (cd "$dir" && "$go" build -trimpath -ldflags "$ldflags" -o "$bin/kube-apiserver" \
            k8s.io/kubernetes/cmd/kube-apiserver); then
            echo "ensure-kube-apiserver: building kube-apiserver $KUBERNETES_VERSION failed (scratch module: $dir)" >&2
            return 1
        fi
        echo "k8s.io/kubernetes $KUBERNETES_VERSION" > "$stamp"
        echo "kube-apiserver $KUBERNETES_VERSION: $bin/kube-apiserver"
    fi

    # etcd
    stamp="$bin/etcd.version"
    if [[ -x "$bin/etcd" && "$(cat "$stamp" 2>/dev/null)" == "go.etcd.io/etcd/server/v3 $ETCD_VERSION" ]]; then
        echo "etcd $ETCD_VERSION: $bin/etcd (built before)"
    else
        echo "building etcd $ETCD_VERSION from the Go module go.etcd.io/etcd/server/v3"
        local dir="$build/etcd"
        rm -rf "$dir" "$stamp"
        mkdir -p "$dir"
        printf 'module wasm-ccm.invalid/etcd-build\n\ngo 1.26.0\n\nrequire go.etcd.io/etcd/server/v3 %s\n' \
            "$ETCD_VERSION" > "$dir/go.mod"
        if ! (cd "$dir" && "$go" build -trimpath -ldflags "-s -w" -o "$bin/etcd" go.etcd.io/etcd/server/v3); then
            echo "ensure-kube-apiserver: building etcd $ETCD_VERSION failed (scratch module: $dir)" >&2
            return 1
        fi
        echo "go.etcd.io/etcd/server/v3 $ETCD_VERSION" > "$stamp"
        echo "etcd $ETCD_VERSION: $bin/etcd"
    fi
}

if [[ -z "${KUBE_APISERVER:-}" || -z "${ETCD:-}" ]]; then
    # In a subshell, so the build's environment (GOFLAGS, CGO_ENABLED) stays out of a
    # sourcing shell; a failed build stops it (set -e) with the message above.
    (_kube_main)
    _kube_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    export KUBE_APISERVER="$_kube_root/target/kube/bin/kube-apiserver" ETCD="$_kube_root/target/kube/bin/etcd"
    unset _kube_root
fi
unset -f _kube_main
