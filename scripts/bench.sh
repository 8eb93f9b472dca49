#!/usr/bin/env bash
# The main job: builds everything, makes the built-in sample dataset (cached), and compares
# ringloader with torch's DataLoader + torchvision's ImageFolder side by side (`ringloader
# compare`, also `python -m ringloader.bench`): the table, one verdict line per transform (the
# stage that limits ringloader) and the path of the full JSON record (--json PATH, default under
# the cache folder); --verbose also prints the loaders' stats(). Arguments go to `ringloader compare`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/ringloader compare "$@"
