#!/usr/bin/env bash
# The npm package of JupyterHub's proxy for the node on PATH: configurable-http-proxy 5 needs Node 20 or newer;
# for an older Node (Debian 12's own is 18) its last 4.x. setup.sh installs what this prints, and so does .ci/run.
set -euo pipefail
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -ge 20 ]; then
    echo configurable-http-proxy@5.3.0
else
    echo configurable-http-proxy@4.6.3
fi
