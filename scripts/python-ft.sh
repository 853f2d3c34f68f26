#!/usr/bin/env bash
# Run the Python test suite on a free-threaded CPython 3.13 (built with
# --disable-gil), with the GIL disabled (`make test` runs it: python-test-ft).
#
# Debian 12 ships no free-threaded interpreter, so the first run builds one:
# the CPython 3.13 source package of Debian trixie is fetched with
# `apt-get source`, through a sources list and apt state of this script's own
# (a temporary folder), pointed at the Debian mirror this machine's apt
# configuration already uses; the system's apt setup is left as it is.  The
# upstream tarball of that package (not the Debian-patched tree, whose
# patches disable ensurepip and change the install layout) is configured with
# --disable-gil and installed into a cache folder outside the clone:
#   ${WEFT_PYTHON_FT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/weft/python-ft}/python3.13t
# Later runs reuse it while it works.
#
# Then a venv (build-ft/venv, ignored by git) gets pytest and the package,
# and pytest runs with PYTHON_GIL=0.  The script exits with pytest's status.
#
#   scripts/python-ft.sh            build if needed, then test
#   scripts/python-ft.sh --build    only make sure the interpreter exists
#   scripts/python-ft.sh --print-interpreter   print its path (builds nothing)
set -euo pipefail

cache=${WEFT_PYTHON_FT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/weft/python-ft}
prefix=$cache/python3.13t
py=$prefix/bin/python3.13t
venv=build-ft/venv
suite=trixie
srcpkg=python3.13
# What a working interpreter with ssl, venv/ensurepip and the usual stdlib
# extension modules needs to build.
build_deps=(gcc make pkg-config xz-utils libssl-dev zlib1g-dev libffi-dev libbz2-dev
            liblzma-dev libsqlite3-dev libreadline-dev libncurses-dev uuid-dev)

[ "${1:-}" = --print-interpreter ] && { echo "$py"; exit 0; }

say() { echo "python-ft.sh: $*" >&2; }
die() { say "$*"; exit 1; }

interpreter_works() {
  [ -x "$py" ] && "$py" - <<'EOF' >/dev/null 2>&1
import sys, sysconfig
import ssl, venv, ensurepip, zlib, bz2, lzma, ctypes, sqlite3, hashlib
assert sysconfig.get_config_var("Py_GIL_DISABLED") == 1
assert not sys._is_gil_enabled()
EOF
}

# First URL of the Debian archive proper (not debian-security, not a
# third-party repository) in this machine's apt configuration.
debian_mirror() {
  local f url
  shopt -s nullglob
  for f in /etc/apt/sources.list.d/*.sources; do
    url=$(awk 'tolower($1) == "uris:" { for (i = 2; i <= NF; i++) print $i }' "$f" |
          grep -E '^(https?|ftp)://[^ ]*/debian/?$' | head -n1) || true
    [ -n "$url" ] && { echo "${url%/}"; return; }
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    # deb [options] URL suite components...
    url=$(sed -E -n 's/^[[:space:]]*deb(-src)?[[:space:]]+(\[[^]]*\][[:space:]]+)?([^[:space:]]+).*/\3/p' "$f" |
          grep -E '^(https?|ftp)://[^ ]*/debian/?$' | head -n1) || true
    [ -n "$url" ] && { echo "${url%/}"; return; }
  done
  return 1
}

ensure_packages() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  [ "$(id -u)" -eq 0 ] || die "missing Debian packages (install them as root): ${missing[*]}"
  say "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" ||
    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"; }
}

fetch_source() {  # $1: folder to download into
  local dest=$1 mirror
  mirror=$(debian_mirror) || die "no Debian archive URL found in /etc/apt/sources.list{,.d}"
  apt_dir=$(mktemp -d "${TMPDIR:-/tmp}/weft-apt.XXXXXX")
  trap 'rm -rf "$apt_dir"' EXIT
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
  local keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  local opt=""
  [ -f "$keyring" ] && opt="[signed-by=$keyring] "
  echo "deb-src ${opt}$mirror $suite main" >"$apt_dir/sources.list"
  local apt_opts=(-o Dir::Etc::sourcelist="$apt_dir/sources.list" -o Dir::Etc::sourceparts=-
                  -o Dir::State::Lists="$apt_dir/lists" -o Dir::Cache="$apt_dir/cache"
                  -o APT::Get::List-Cleanup=0)
  # The temporary folders belong to this user; apt's _apt sandbox user could not write there.
  [ "$(id -u)" -eq 0 ] && apt_opts+=(-o APT::Sandbox::User=root)
  say "fetching $srcpkg source from $mirror ($suite)"
  apt-get -q "${apt_opts[@]}" update >&2
  (cd "$dest" && apt-get -q "${apt_opts[@]}" source --download-only "$srcpkg/$suite" >&2)
  rm -rf "$apt_dir"
}

build_interpreter() {
  local work=$cache/work log=$cache/build.log t0 t1 orig src
  rm -rf "$work" "$prefix"
  mkdir -p "$work"
  ensure_packages "${build_deps[@]}"
  t0=$(date +%s)
  fetch_source "$work"
  t1=$(date +%s)
  say "download took $((t1 - t0)) s"
  orig=$(ls "$work"/"${srcpkg}"_*.orig.tar.* 2>/dev/null | head -n1)
  [ -n "$orig" ] || die "no upstream tarball among the downloaded files: $(ls "$work")"
  tar -xf "$orig" -C "$work"
  src=$(find "$work" -mindepth 2 -maxdepth 2 -name configure -path '*/Python-*' -printf '%h\n' | head -n1)
  [ -n "$src" ] || die "no configure script in $orig"
  say "building $(basename "$src") into $prefix (log: $log)"
  t0=$(date +%s)
  (
    cd "$src"
    ./configure --disable-gil --prefix="$prefix" --with-ensurepip=install
    make -j"$(nproc)"
    make install
  ) >"$log" 2>&1 || { tail -n 40 "$log" >&2; die "build failed; see $log"; }
  t1=$(date +%s)
  say "configure+make+install took $((t1 - t0)) s"
  rm -rf "$work"
}

if interpreter_works; then
  say "reusing $py"
else
  build_interpreter
  interpreter_works || die "$py was built but does not work (ssl, venv, ensurepip, or the GIL)"
fi
"$py" -VV >&2
[ "${1:-}" = --build ] && exit 0

[ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip >/dev/null
"$venv/bin/python" -m pip install -q pytest pytest-timeout
# NumPy only serves some data tests (they skip without it); take a
# free-threaded wheel if one exists, never build it from source.
"$venv/bin/python" -m pip install -q --only-binary=:all: numpy ||
  say "no free-threaded NumPy wheel: NumPy tests will be skipped"
"$venv/bin/python" -m pip install -q .
# Numba from a wheel only (none exists for the free-threaded 3.13 yet): the
# tests that need it skip, saying why.
numba_env=()
why=$(scripts/python-numba.sh "$venv/bin/python") || {
  say "$why"
  numba_env=(WEFT_NUMBA_UNAVAILABLE="$why")
}
# mpi4py from source against the system's MPI; if it does not build for
# this interpreter, the tests that need it skip, saying why.
mpi4py_env=()
why=$(scripts/python-mpi4py.sh "$venv/bin/python") || {
  say "$why"
  mpi4py_env=(WEFT_MPI4PY_UNAVAILABLE="$why")
}

# Without PYTHON_GIL, an extension module that does not declare itself safe
# to run without the GIL turns the GIL back on when imported.
gil_after_import=$(env -u PYTHON_GIL "$venv/bin/python" -W ignore -c 'import sys, weft; print(sys._is_gil_enabled())')
say "GIL enabled after 'import weft' (PYTHON_GIL unset): $gil_after_import"
gil_forced=$(PYTHON_GIL=0 "$venv/bin/python" -c 'import sys, weft; print(sys._is_gil_enabled())')
say "GIL enabled after 'import weft' (PYTHON_GIL=0): $gil_forced"
[ "$gil_forced" = False ] || die "the GIL is on even with PYTHON_GIL=0"

rc=0
env ${mpi4py_env[@]+"${mpi4py_env[@]}"} ${numba_env[@]+"${numba_env[@]}"} PYTHON_GIL=0 WEFT_EXPECT_FREE_THREADED=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider -rfEs python/tests || rc=$?
exit "$rc"
