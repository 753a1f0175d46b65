#!/bin/sh
# Builds build/{file}.wasm from app.js with componentize-js (installed once
# into node_modules, pinned in package.json). `--disable fetch-event`: a tool
# is called, never sent HTTP requests to serve.
set -eu
cd "$(dirname "$0")"
[ -d node_modules/@bytecodealliance/componentize-js ] || npm install --silent --no-audit --no-fund
mkdir -p build
npx componentize-js app.js --wit wit --world-name toolset --disable fetch-event -o build/{file}.wasm
