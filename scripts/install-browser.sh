#!/usr/bin/env bash
# Installs what the report tests (tests/report) need, idempotently (nothing to do
# when all is there):
#   - Debian's chromium: the browser of the browser test (Playwright's own browser
#     download is never used; the test launches /usr/bin/chromium);
#   - the Python packages playwright (drives it), tensorboard and torch-tb-profiler
#     (the trace test loads written traces into TensorBoard's PyTorch profiler plugin).
# Usage: scripts/install-browser.sh [PYTHON]   (default: .venv/bin/python)
set -euo pipefail
PY="${1:-.venv/bin/python}"
if ! command -v chromium >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
fi
missing=()
"$PY" -c "import playwright" >/dev/null 2>&1 || missing+=("playwright>=1.40")
"$PY" -c "import tensorboard" >/dev/null 2>&1 || missing+=("tensorboard>=2.16")
"$PY" -c "import torch_tb_profiler" >/dev/null 2>&1 || missing+=("torch-tb-profiler==0.4.3")
if [ ${#missing[@]} -gt 0 ]; then
    "$PY" -m pip install -q "${missing[@]}"
fi
chromium --version 2>/dev/null
