#!/usr/bin/env bash
# Sourced by scripts/test.sh: installs Huawei Cloud's official Python SDK (its core,
# whose signer re-signs what the host signed, and the ECS, ELB, EIP and VPC clients that
# drive tests/huaweicloud-double) into target/tools-venv, pinned, and exports the
# venv's python as $HUAWEICLOUD_SDK_PYTHON. tests/huaweicloud/ and the double's checks
# use it; nothing it installs talks to anything but 127.0.0.1 there.
HUAWEICLOUD_SDK_VERSION=3.1.219
venv=target/tools-venv
packages=(huaweicloudsdkcore huaweicloudsdkecs huaweicloudsdkelb huaweicloudsdkeip huaweicloudsdkvpc)
huaweicloud_sdk_installed() {
    local package
    for package in "${packages[@]}"; do
        "$venv/bin/pip" show "$package" 2>/dev/null | grep -qx "Version: $HUAWEICLOUD_SDK_VERSION" || return 1
    done
}
if ! huaweicloud_sdk_installed; then
    echo "installing huaweicloudsdk{core,ecs,elb,eip,vpc} $HUAWEICLOUD_SDK_VERSION into $venv (PyPI)"
    [[ -x "$venv/bin/pip" ]] || python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        "${packages[@]/%/==$HUAWEICLOUD_SDK_VERSION}"
fi
export HUAWEICLOUD_SDK_PYTHON="$PWD/$venv/bin/python"
