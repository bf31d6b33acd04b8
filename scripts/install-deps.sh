#!/usr/bin/env bash
# Installs the toolkit's build and run dependencies from Debian packages. Idempotent: when every
# package is already installed it changes nothing and needs no network; otherwise it runs
# `apt-get update` once and installs what is missing. Runs apt-get through sudo when not root.
set -euo pipefail

PACKAGES=(
  g++ cmake make pkg-config ccache git
  libopenmpi-dev openmpi-bin
  libcli11-dev libyaml-cpp-dev libzstd-dev zstd liburing-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev nlohmann-json3-dev libpcre2-dev
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages already installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null; then SUDO="sudo"; else
    echo "install-deps: error: need root or sudo to install: ${missing[*]}" >&2
    exit 1
  fi
fi

echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
