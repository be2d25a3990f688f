#!/usr/bin/env bash
# Set up (scripts/setup.sh), then lint, type-check and run the default (fast) test suite.
# Slow tests (a real local model end to end) run with: scripts/test.sh -m slow
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check src tests benchmarks
.venv/bin/ruff format --check src tests benchmarks
.venv/bin/mypy src
.venv/bin/pytest -q "$@"
