#!/usr/bin/env bash
# Puts real models' chat templates into .cache/chat_templates/ (NAME.jinja, and all/ for every one) from the npm
# package @huggingface/ollama-utils, which carries them. They are not committed; set-up runs this, and the chat
# template tests render them against jinja2. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VERSION=0.0.18
OUT=$ROOT/.cache/chat_templates
PKG=$OUT/npm/node_modules/@huggingface/ollama-utils

if [ ! -f "$PKG/package.json" ] || ! grep -q "\"version\": \"$VERSION\"" "$PKG/package.json"; then
  echo "fetch_chat_templates: fetching @huggingface/ollama-utils@$VERSION with npm"
  mkdir -p "$OUT/npm"
  [ -f "$OUT/npm/package.json" ] || echo '{"name":"tokamak-chat-templates","private":true}' > "$OUT/npm/package.json"
  (cd "$OUT/npm" && npm install --no-audit --no-fund --loglevel=error "@huggingface/ollama-utils@$VERSION" >/dev/null)
  rm -f "$OUT/qwen3.jinja"
fi
if [ ! -f "$OUT/qwen3.jinja" ]; then
  node scripts/chat_templates_from_npm.mjs "$PKG" "$OUT"
fi
