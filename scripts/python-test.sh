#!/usr/bin/env bash
# Builds the Python package (python/) and runs its pytest suite (tests/python) under mpiexec.mpich
# at 1, 2, 3 and 4 ranks. The package links the libdistop of the Release tree
# ${DISTOP_BUILD_DIR:-build} where scripts/test.sh has built it (installed into
# ${DISTOP_PY_BUILD_DIR:-build-python}/prefix and found through CMAKE_PREFIX_PATH), so that CI does
# not build the library twice; without one, pip builds libdistop from the repository itself.
# Everything else lives in ${DISTOP_PY_BUILD_DIR:-build-python}: the virtual environment (made
# with --system-site-packages from /usr/bin/python3, so that Debian's python3-torch and numpy are
# seen), the extension's build tree (kept between runs) and the ranks' logs.
#
# mpi4py comes from PyPI as its binary wheel, which loads the MPI library by the name MPICH
# upstream gives it, libmpi.so.12; Debian names the same library libmpich.so.12, so the venv gets
# a link of that name, put on LD_LIBRARY_PATH for the tests. DISTOP_MPI4PY=source builds mpi4py
# against MPICH instead (MPICC=mpicc.mpich; about 2.5 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
build=${DISTOP_BUILD_DIR:-build}
pybuild=$(realpath -m "${DISTOP_PY_BUILD_DIR:-build-python}")
venv=$pybuild/venv
bash scripts/install-deps.sh python3-venv python3-dev python3-torch python3-numpy

# libdistop from the Release tree, installed where the package's CMake finds it.
cmake_args=()
if [ -e "$build/src/libdistop.so" ] || [ -e "$build/src/libdistop.a" ]; then
  cmake --install "$build" --prefix "$pybuild/prefix" >/dev/null
  export CMAKE_PREFIX_PATH=$pybuild/prefix${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
else
  echo "distop: no libdistop in $build; the package builds its own" >&2
fi
# ccache, with paths taken relative to the repository: a fresh clone elsewhere hits the cache too.
if command -v ccache >/dev/null; then
  cmake_args+=(--config-settings=cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR=$PWD
fi

[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv --system-site-packages "$venv"
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
"${pip[@]}" scikit-build-core nanobind pytest
if [ "${DISTOP_MPI4PY:-wheel}" = source ]; then
  MPICC=mpicc.mpich "${pip[@]}" --no-binary=mpi4py mpi4py
else
  "${pip[@]}" --only-binary=mpi4py mpi4py
fi
libmpich=$(ldconfig -p | awk '/libmpich\.so\.12 /{path = $NF} END {print path}')
mkdir -p "$venv/lib/mpich"
ln -sf "$libmpich" "$venv/lib/mpich/libmpi.so.12"
export LD_LIBRARY_PATH=$venv/lib/mpich${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

"${pip[@]}" --no-build-isolation "${cmake_args[@]}" --config-settings=build-dir="$pybuild/wheel" ./python

# Rank 0 prints pytest's report; the other ranks write theirs to logs, shown when a run fails.
export PYTHONDONTWRITEBYTECODE=1
logs=$pybuild/logs
mkdir -p "$logs"
status=0
for n in ${DISTOP_PY_RANKS:-1 2 3 4}; do
  echo "distop: Python tests at $n rank(s)"
  rm -f "$logs"/rank*.txt
  if ! timeout 600 mpiexec.mpich -n "$n" bash -c '
      if [ "${PMI_RANK:-0}" = 0 ]; then exec "$0" -m pytest -q -s -p no:cacheprovider "$@"
      else exec "$0" -m pytest -q -s -p no:cacheprovider "$@" > "'"$logs"'/rank$PMI_RANK.txt" 2>&1; fi' \
      "$venv/bin/python" tests/python "$@"; then
    status=1
    for f in "$logs"/rank*.txt; do [ -e "$f" ] && { echo "---- $f"; tail -n 60 "$f"; }; done
  fi
done
exit $status
