#!/usr/bin/env bash
# Sourced by scripts/test.sh: makes `promtool` and `prometheus` (tests/monitoring.rs
# checks and unit-tests deploy/monitoring/alerts.yaml with promtool and scrapes the
# secure port with prometheus) available as $PROMTOOL and $PROMETHEUS. Uses those on
# PATH, else installs Debian's `prometheus` package (which ships both) when apt-get can
# run here (as root), without starting its service.
if [[ -n "${PROMTOOL:-}" && -n "${PROMETHEUS:-}" ]]; then
    return 0
fi
if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
        echo "promtool or prometheus not found; installing Debian's prometheus package"
        # The package's service must not start (it would outlive the run): policy-rc.d
        # refusing every start, as in container images, for the install only.
        own_policy=""
        if [[ ! -e /usr/sbin/policy-rc.d ]]; then
            printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
            chmod +x /usr/sbin/policy-rc.d
            own_policy=1
        fi
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
        if [[ -n "$own_policy" ]]; then
            rm -f /usr/sbin/policy-rc.d
        fi
    else
        echo "promtool or prometheus not found: install Debian's prometheus package (or set PROMTOOL and PROMETHEUS)" >&2
        return 1
    fi
fi
export PROMTOOL="${PROMTOOL:-promtool}" PROMETHEUS="${PROMETHEUS:-prometheus}"
