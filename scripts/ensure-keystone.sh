#!/usr/bin/env bash
# Sourced by scripts/test.sh: installs the pinned Keystone (OpenStack's identity
# service, PyPI `keystone`) and gunicorn into the tools venv, where the OpenStack tests
# run it offline on 127.0.0.1 (tests/keystone-peer), and openstacksdk, the real client
# that checks the OpenStack API double. Skipped when $KEYSTONE_VENV is set.
KEYSTONE_VERSION=30.0.0
GUNICORN_VERSION=27.0.1
OPENSTACKSDK_VERSION=4.22.0
if [[ -n "${KEYSTONE_VENV:-}" ]]; then
    return 0
fi
venv=target/tools-venv
installed() { "$venv/bin/pip" show "$1" 2>/dev/null | grep -qx "Version: $2"; }
if [[ ! -x "$venv/bin/gunicorn" ]] || ! installed keystone "$KEYSTONE_VERSION" \
    || ! installed openstacksdk "$OPENSTACKSDK_VERSION"; then
    echo "installing keystone $KEYSTONE_VERSION, gunicorn $GUNICORN_VERSION and openstacksdk $OPENSTACKSDK_VERSION into $venv (PyPI)"
    [[ -x "$venv/bin/pip" ]] || python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        "keystone==$KEYSTONE_VERSION" "gunicorn==$GUNICORN_VERSION" \
        "openstacksdk==$OPENSTACKSDK_VERSION"
fi
export KEYSTONE_VENV="$PWD/$venv"
