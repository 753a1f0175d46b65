#!/bin/sh
# Builds build/{file}.wasm from app.py with componentize-py (installed once
# into .venv, pinned in requirements.txt).
set -eu
cd "$(dirname "$0")"
if [ ! -x .venv/bin/componentize-py ]; then
  python3 -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
fi
mkdir -p build
PYTHONDONTWRITEBYTECODE=1 .venv/bin/componentize-py -d wit -w toolset-http componentize app -p . -o build/{file}.wasm
