#!/usr/bin/env bash
# Builds pinned upstream cloud controller managers into target/kube/bin/ from their Go
# modules (the Go module proxy), for the tests that run them beside wasm-ccm:
#   occm     openstack-cloud-controller-manager (k8s.io/cloud-provider-openstack):
#            tests/occm_migration.rs makes with it what a cluster moving from occm has;
#   aws-ccm  aws-cloud-controller-manager (k8s.io/cloud-provider-aws): tests/aws_oracle/
#            runs it and wasm-ccm on the same scenarios and compares what they leave.
# Usage: scripts/ensure-upstream-ccm.sh [occm] [aws-ccm]   (both without arguments)
# Sourced (scripts/test.sh does), it exports $OCCM and $AWS_CCM, the binaries' paths. A
# binary is reused while its stamp file names the pinned version; one whose variable is
# already set is not built.
#
# A dependency's replace directives are ignored, so the scratch go.mod
# (target/ccm-build/<name>/) copies the module's own (they pin the k8s.io/kubernetes
# staging modules that k8s.io/kubernetes requires at v0.0.0), but local paths and the
# skipped: cloud-provider-aws's `github.com/google/cel-go => github.com/cel-expr/cel-go`
# is refused by the Go module proxy (403), so cel-go stays at the version it requires.
set -euo pipefail

# name | module | version | command package | binary | -X for the version | replaces skipped
_UPSTREAM_CCMS=(
    # The newest release the Go module proxy serves (v1.35.1+ except v1.36.0 are refused).
    "occm|k8s.io/cloud-provider-openstack|v1.36.0|cmd/openstack-cloud-controller-manager|openstack-cloud-controller-manager|k8s.io/cloud-provider-openstack/pkg/version.Version|"
    # The release for Kubernetes 1.37 (built against k8s.io/* v0.37.0).
    "aws-ccm|k8s.io/cloud-provider-aws|v1.37.1|cmd/aws-cloud-controller-manager|aws-cloud-controller-manager|main.gitVersion|github.com/google/cel-go"
)

_upstream_ccm_build() {
    local name="$1" module version package binary version_var skip
    local root bin dir go json stamp modfile entry found=""
    for entry in "${_UPSTREAM_CCMS[@]}"; do
        if [[ "${entry%%|*}" == "$name" ]]; then
            found="$entry"
        fi
    done
    if [[ -z "$found" ]]; then
        echo "ensure-upstream-ccm: no upstream CCM named \`$name\` (known: occm, aws-ccm)" >&2
        return 1
    fi
    IFS='|' read -r name module version package binary version_var skip <<< "$found"
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    bin="$root/target/kube/bin"
    dir="$root/target/ccm-build/$name"
    stamp="$bin/$binary.version"
    go="$(command -v go || true)"
    [[ -n "$go" ]] || go=/usr/local/go/bin/go
    if [[ ! -x "$go" ]]; then
        echo "ensure-upstream-ccm: no Go toolchain (go on PATH or /usr/local/go/bin/go)" >&2
        return 1
    fi
    mkdir -p "$bin"
    # One build at a time: a second caller (CI starts one in the background) waits for
    # the first, then finds the binary built.
    exec 8>"$bin/.$binary.lock"
    flock 8
    if [[ -x "$bin/$binary" && "$(cat "$stamp" 2>/dev/null)" == "$module $version" ]]; then
        echo "$binary $version: $bin/$binary (built before)"
        return 0
    fi
    echo "building $binary $version from the Go module $module (several minutes)"
    export GOFLAGS="-mod=mod ${GOFLAGS:-}" CGO_ENABLED=0
    rm -rf "$dir" "$stamp"
    mkdir -p "$dir"
    if ! json="$(cd "$dir" && "$go" mod download -json "$module@$version" 2>&1)" \
        || ! modfile="$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p' <<< "$json")" \
        || [[ ! -s "$modfile" ]]; then
        echo "ensure-upstream-ccm: could not fetch $module $version's go.mod from the Go module proxy:" >&2
        echo "$json" >&2
        return 1
    fi
    {
        printf 'module wasm-ccm.invalid/%s-build\n\ngo 1.26.0\n\nrequire %s %s\n\nreplace (\n' "$name" "$module" "$version"
        # The module's replace directives (one-line and blocks), but local paths and the skipped.
        awk -v skip=" $skip " '/^replace[[:space:]]*\(/ { block = 1; next }
             block && /^\)/ { block = 0; next }
             block || /^replace[[:space:]]/ { sub(/^replace[[:space:]]+/, ""); sub(/\/\/.*/, ""); gsub(/^[[:space:]]+|[[:space:]]+$/, "");
                                               if ($0 ~ /=>/ && $0 !~ /=>[[:space:]]*\.\.?\// && index(skip, " " $1 " ") == 0) print "\t" $0 }' "$modfile"
        printf ')\n'
    } > "$dir/go.mod"
    if ! (cd "$dir" && "$go" build -trimpath \
        -ldflags "-s -w -X $version_var=$version -X k8s.io/component-base/version.gitVersion=$version" \
        -o "$bin/$binary" "$module/$package"); then
        echo "ensure-upstream-ccm: building $binary $version failed (scratch module: $dir)" >&2
        return 1
    fi
    echo "$module $version" > "$stamp"
    echo "$binary $version: $bin/$binary"
}

_upstream_ccm_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_upstream_ccm_names=("$@")
[[ ${#_upstream_ccm_names[@]} -gt 0 ]] || _upstream_ccm_names=(occm aws-ccm)
for _upstream_ccm_name in "${_upstream_ccm_names[@]}"; do
    case "$_upstream_ccm_name" in
        occm)
            if [[ -z "${OCCM:-}" ]]; then
                # In a subshell, so the build's environment stays out of a sourcing
                # shell; a failed build stops it (set -e) with the message above.
                (_upstream_ccm_build occm)
                export OCCM="$_upstream_ccm_root/target/kube/bin/openstack-cloud-controller-manager"
            fi
            ;;
        aws-ccm)
            if [[ -z "${AWS_CCM:-}" ]]; then
                (_upstream_ccm_build aws-ccm)
                export AWS_CCM="$_upstream_ccm_root/target/kube/bin/aws-cloud-controller-manager"
            fi
            ;;
        *)
            _upstream_ccm_build "$_upstream_ccm_name"
            ;;
    esac
done
unset -f _upstream_ccm_build
unset _upstream_ccm_root _upstream_ccm_names _upstream_ccm_name _UPSTREAM_CCMS
