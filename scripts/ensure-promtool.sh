#!/usr/bin/env bash
# Sourced by scripts/test.sh: makes `promtool` (tests/monitoring.rs checks and
# unit-tests deploy/monitoring/alerts.yaml with it) available as $PROMTOOL. Uses the one
# on PATH, else installs Debian's `prometheus` package (which ships it) when apt-get can
# run here (as root).
if [[ -n "${PROMTOOL:-}" ]]; then
    return 0
fi
if ! command -v promtool >/dev/null 2>&1; then
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
        echo "promtool not found; installing Debian's prometheus package"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
    else
        echo "promtool not found: install Debian's prometheus package (or set PROMTOOL)" >&2
        return 1
    fi
fi
export PROMTOOL=promtool
