#!/usr/bin/env bash
# The Python side (python/: agl_trainer; examples/grpo-trainer): makes the virtual environment
# .venv when it is missing or its package list changed, then runs the Python tests.
#   scripts/python-env.sh            install if needed, then pytest
#   scripts/python-env.sh --install  install if needed only
# pip is set up on this project's machines to find the packages locally (torch's CPU wheel in
# /opt/wheels): no retries, short timeouts, so a missing package fails at once, not after minutes.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv
PACKAGES=(torch==2.13.0 transformers==5.18.0 trl==1.13.0 peft==0.21.0 accelerate==1.15.0 datasets==5.0.1 pyarrow pytest numpy aiohttp httpx)
# What the environment was made from: a change of either makes it again.
wanted="${PACKAGES[*]} $(cksum < python/pyproject.toml)"
marker="$VENV/.agl-packages"

if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$marker" 2>/dev/null)" != "$wanted" ]; then
  echo "python-env: making $VENV (${PACKAGES[*]}, agl_trainer from python/)"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --retries 0 --timeout 2 "${PACKAGES[@]}"
  "$VENV/bin/pip" install --quiet --retries 0 --timeout 2 -e python/
  echo "$wanted" > "$marker"
fi

if [ "${1:-}" = "--install" ]; then exit 0; fi
exec "$VENV/bin/python" -m pytest -q python/tests examples/grpo-trainer/tests examples/trl-grpo/tests
