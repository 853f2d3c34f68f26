#!/usr/bin/env bash
# Install what `make demo` / `make test` need on a fresh Debian machine.
# As root it installs missing Debian packages with apt-get; otherwise it
# prints the exact command to run and fails.
set -euo pipefail

need_pkgs=()
have_cmd() { command -v "$1" >/dev/null 2>&1; }
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

have_cmd cmake || need_pkgs+=(cmake)
have_cmd cc    || need_pkgs+=(gcc)
have_cmd make  || need_pkgs+=(make)
have_cmd pkg-config || need_pkgs+=(pkg-config)
if ! have_cmd python3; then
  need_pkgs+=(python3 python3-venv python3-dev)
elif ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  need_pkgs+=(python3-venv)
fi
# OpenMP runtime for the benchmark's peer (gcc ships omp.h; libgomp1 the library).
have_pkg libgomp1 || need_pkgs+=(libgomp1)
# Extra packages declared by parts of the tree (one name per line, # comments).
if [ -f scripts/debian-packages.txt ]; then
  while read -r p; do
    p=${p%%#*}; p=${p// /}
    [ -n "$p" ] && ! have_pkg "$p" && need_pkgs+=("$p")
  done < scripts/debian-packages.txt
fi

[ ${#need_pkgs[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ] && have_cmd apt-get; then
  echo "ensure-deps: installing ${need_pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
else
  echo "ensure-deps: missing packages: ${need_pkgs[*]}" >&2
  echo "run: sudo apt-get update && sudo apt-get install -y ${need_pkgs[*]}" >&2
  exit 1
fi
