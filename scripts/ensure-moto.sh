#!/usr/bin/env bash
# Sourced by scripts/test.sh: makes moto's server (the AWS emulator the AWS provider's
# tests run against, on 127.0.0.1 only) available as $MOTO_SERVER. Installs the pinned
# version into target/tools-venv unless $MOTO_SERVER is already set.
MOTO_VERSION=5.2.5
if [[ -n "${MOTO_SERVER:-}" ]]; then
    return 0
fi
venv=target/tools-venv
if [[ ! -x "$venv/bin/moto_server" ]] || ! "$venv/bin/pip" show moto 2>/dev/null | grep -qx "Version: $MOTO_VERSION"; then
    echo "installing moto $MOTO_VERSION into $venv (PyPI: moto)"
    [[ -x "$venv/bin/pip" ]] || python3 -m venv "$venv"
    # The services the tests use, and the two packages its server needs (a third of
    # the size of moto[server]).
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        "moto[ec2,elbv2,iam,sts]==$MOTO_VERSION" flask==3.1.3 flask-cors==6.0.5
fi
export MOTO_SERVER="$PWD/$venv/bin/moto_server"
