#!/usr/bin/env bash
# Set up a virtual environment in .venv with rlmdistill, its dev tools and the extras its tests
# use: ray (the Ray executor's tests run a local multi-node cluster), inspect (export-inspect
# writes and reads Inspect eval logs) and import-test (the real `rlms` and `verifiers` producers of the import
# tests).
# torch's CPU wheel goes in first: a bare `torch` requirement would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[dev,ray,inspect,import-test]"
