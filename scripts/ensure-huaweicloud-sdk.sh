#!/usr/bin/env bash
# Sourced by scripts/test.sh: installs Huawei Cloud's official Python SDK (its core,
# whose signer re-signs what the host signed, and the ECS, ELB, EIP and VPC clients that
# drive tests/huaweicloud-double) into target/tools-venv, pinned, and exports the
# venv's python as $HUAWEICLOUD_SDK_PYTHON. tests/huaweicloud/ and the double's checks
# use it; nothing it installs talks to anything but 127.0.0.1 there.
HUAWEICLOUD_SDK_VERSION=3.1.219
venv=target/tools-venv
if ! "$venv/bin/pip" show huaweicloudsdkcore 2>/dev/null | grep -qx "Version: $HUAWEICLOUD_SDK_VERSION" \
    || ! "$venv/bin/pip" show huaweicloudsdkvpc 2>/dev/null | grep -qx "Version: $HUAWEICLOUD_SDK_VERSION"; then
    echo "installing huaweicloudsdk{core,ecs,elb,eip,vpc} $HUAWEICLOUD_SDK_VERSION into $venv (PyPI)"
    [[ -x "$venv/bin/pip" ]] || python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        "huaweicloudsdkcore==$HUAWEICLOUD_SDK_VERSION" \
        "huaweicloudsdkecs==$HUAWEICLOUD_SDK_VERSION" \
        "huaweicloudsdkelb==$HUAWEICLOUD_SDK_VERSION" \
        "huaweicloudsdkeip==$HUAWEICLOUD_SDK_VERSION" \
        "huaweicloudsdkvpc==$HUAWEICLOUD_SDK_VERSION"
fi
export HUAWEICLOUD_SDK_PYTHON="$PWD/$venv/bin/python"
