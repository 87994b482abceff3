#!/usr/bin/env bash
# Builds pinned Go tools the tests run into target/kube/bin/, from their Go modules (the
# Go module proxy) with `go install module/cmd@version` (none of them has replace
# directives, so no scratch module is needed; none of their code is in this repository):
#   helm   helm.sh/helm/v3: tests/helm.rs lints and renders deploy/helm/wasm-ccm.
# Usage: scripts/ensure-go-tools.sh [helm]   (all without arguments)
# Sourced (scripts/test.sh does), it exports each tool's variable ($HELM) with the
# binary's path. A binary is reused while its stamp file names the pinned version; one
# whose variable is already set is not built.
set -euo pipefail

# name | module | version | command package | variable | -X for the version
_GO_TOOLS=(
    "helm|helm.sh/helm/v3|v3.22.0|cmd/helm|HELM|helm.sh/helm/v3/internal/version.version"
)

_go_tool_build() {
    local want="$1" entry found="" name module version package variable version_var
    local root bin go stamp
    for entry in "${_GO_TOOLS[@]}"; do
        [[ "${entry%%|*}" == "$want" ]] && found="$entry"
    done
    if [[ -z "$found" ]]; then
        echo "ensure-go-tools: no tool named \`$want\` (known: helm)" >&2
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
[[ ${#_go_tools_names[@]} -gt 0 ]] || _go_tools_names=(helm)
for _go_tools_name in "${_go_tools_names[@]}"; do
    case "$_go_tools_name" in
        helm)
            if [[ -z "${HELM:-}" ]]; then
                # In a subshell, so the build's environment stays out of a sourcing
                # shell; a failed build stops it (set -e) with the message above.
                (_go_tool_build helm)
                export HELM="$_go_tools_root/target/kube/bin/helm"
            fi
            ;;
        *)
            _go_tool_build "$_go_tools_name"
            ;;
    esac
done
unset -f _go_tool_build
unset _go_tools_root _go_tools_names _go_tools_name _GO_TOOLS
