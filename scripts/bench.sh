#!/usr/bin/env bash
# The main job: builds everything, makes the built-in sample dataset (cached), and compares
# ringloader with torch's DataLoader + torchvision's ImageFolder side by side.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m ringloader.bench "$@"
