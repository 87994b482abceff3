#!/usr/bin/env bash
# Builds pinned Go tools the tests run into target/kube/bin/, from their Go modules (the
# Go module proxy) with `go install module/cmd@version` (none of them has replace
# directives, so no scratch module is needed; none of their code is in this repository):
#   helm      helm.sh/helm/v3: tests/helm.rs lints and renders deploy/helm/wasm-ccm.
#   registry  github.com/distribution/distribution/v3: the OCI registry providers are
#             pulled from in tests/oci_source.rs (TLS, basic auth).
#   cosign    github.com/sigstore/cosign/v2: signs those providers (v2: its defaults
#             sign offline with a key and write the `.sig` tag).
# Usage: scripts/ensure-go-tools.sh [helm|registry|cosign ...]   (all without arguments)
# Sourced (scripts/test.sh does), it exports each tool's variable ($HELM,
# $OCI_REGISTRY, $COSIGN) with the binary's path. A binary is reused while its stamp file names the pinned version; one
# whose variable is already set is not built.
set -euo pipefail

# name | module | version | command package | variable | -X for the version
_GO_TOOLS=(
    "helm|helm.sh/helm/v3|v3.22.0|cmd/helm|HELM|helm.sh/helm/v3/internal/version.version"
    "registry|github.com/distribution/distribution/v3|v3.1.2|cmd/registry|OCI_REGISTRY|github.com/distribution/distribution/v3/version.version"
    "cosign|github.com/sigstore/cosign/v2|v2.6.5|cmd/cosign|COSIGN|sigs.k8s.io/release-utils/version.gitVersion"
)

_go_tool_build() {
    local want="$1" entry found="" name module version package variable version_var
    local root bin go stamp
    for entry in "${_GO_TOOLS[@]}"; do
        [[ "${entry%%|*}" == "$want" ]] && found="$entry"
    done
    if [[ -z "$found" ]]; then
        echo "ensure-go-tools: no tool named \`$want\` (known: helm, registry, cosign)" >&2
        return 1
    fi
    IFS='|' read -r name module version package variable version_var <<< "$found"
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    bin="$root/target/kube/bin"
    stamp="$bin/$name.version"
    go="$(command -v go || true)"
    [[ -n "$go" ]] || go=/usr/local/go/bin/go
    if [[ ! -x "$go" ]]; then
        echo "ensure-go-tools: no Go toolchain (go on PATH or /usr/local/go/bin/go)" >&2
        return 1
    fi
    mkdir -p "$bin"
    # One build at a time: a second caller waits for the first, then finds it built.
    exec 8>"$bin/.$name.lock"
    flock 8
    if [[ -x "$bin/$name" && "$(cat "$stamp" 2>/dev/null)" == "$module $version" ]]; then
        echo "$name $version: $bin/$name (built before)"
        return 0
    fi
    echo "building $name $version from the Go module $module (a few minutes)"
    rm -f "$stamp"
    if ! CGO_ENABLED=0 GOBIN="$bin" GOFLAGS="-mod=mod" "$go" install -trimpath \
        -ldflags "-s -w -X $version_var=$version" "$module/$package@$version"; then
        echo "ensure-go-tools: building $name $version failed" >&2
        return 1
    fi
    echo "$module $version" > "$stamp"
    echo "$name $version: $bin/$name"
}

_go_tools_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_go_tools_names=("$@")
if [[ ${#_go_tools_names[@]} -eq 0 ]]; then
    for _go_tools_entry in "${_GO_TOOLS[@]}"; do _go_tools_names+=("${_go_tools_entry%%|*}"); done
fi
for _go_tools_name in "${_go_tools_names[@]}"; do
    _go_tools_variable=""
    for _go_tools_entry in "${_GO_TOOLS[@]}"; do
        if [[ "${_go_tools_entry%%|*}" == "$_go_tools_name" ]]; then
            IFS='|' read -r _ _ _ _ _go_tools_variable _ <<< "$_go_tools_entry"
        fi
    done
    if [[ -z "$_go_tools_variable" ]]; then
        echo "ensure-go-tools: no tool named \`$_go_tools_name\` (known: helm, registry, cosign)" >&2
        false
    fi
    if [[ -z "${!_go_tools_variable:-}" ]]; then
        # In a subshell, so the build's environment stays out of a sourcing shell; a
        # failed build stops it (set -e) with the message _go_tool_build prints.
        (_go_tool_build "$_go_tools_name")
        export "$_go_tools_variable=$_go_tools_root/target/kube/bin/$_go_tools_name"
    fi
done
unset -f _go_tool_build
unset _go_tools_root _go_tools_names _go_tools_name _go_tools_entry _go_tools_variable _GO_TOOLS
