#!/usr/bin/env bash
# The acceptance run of distop.distdl (docs/python.md, "DistDL programs"): DistDL's own test suite
# at commit a641638, its imports changed from distdl to distop.distdl and nothing else, under
# mpiexec.mpich at 1, 2, 3 and 4 ranks. Not part of CI: it reads DistDL's sources from a git
# mirror (DISTDL_MIRROR) that CI machines do not have, and none of DistDL's code is kept in this
# repository.
#
# What it does:
# 1. exports tests/ of DistDL at DISTDL_COMMIT (git archive) into a temporary folder outside the
#    repository (DISTDL_TESTS_DIR, default a fresh mktemp -d);
# 2. rewrites the imports in every exported .py file with exactly
#      sed -E -i 's/^(\s*)from distdl([. ])/\1from distop.distdl\2/; s/^(\s*)import distdl$/\1from distop import distdl/; s/^(\s*)import distdl\./\1import distop.distdl./'
#    (`from distdl.x import y` -> `from distop.distdl.x import y`, `import distdl` ->
#    `from distop import distdl`, which keeps the name the tests use, and
#    `import distdl.x as y` -> `import distop.distdl.x as y`); no other change;
# 3. installs pytest 7 and pytest-mpi (pip --target) into $work/site, put first on PYTHONPATH: DistDL's
#    conftest.py marks its fixtures with pytest.mark.mpi, which pytest 8 deprecated and pytest 9
#    (the package's tests' pytest) refuses ("Marks cannot be applied to fixtures");
# 4. runs pytest --with-mpi on tests/primitives, tests/layers, then tests/sequential_layers
#    (DISTDL_FOLDERS: folders or
#    files under tests/, such as layers/test_upsampling.py), at
#    DISTDL_RANKS (default 1 2 3 4) ranks; cases marked mpi(min_size=N) for N above the rank
#    count are skipped by pytest-mpi. A test module that does not import (a name distop.distdl
#    lacks) counts as one error and the others still run (--continue-on-collection-errors). Rank 0's summary line (passed/failed/skipped) is printed per
#    folder and rank count; every rank's full report is in $DISTDL_TESTS_DIR/logs.
#
# The package must be installed in the venv first (scripts/python-test.sh with the same
# DISTOP_PY_BUILD_DIR; default build-python). Exit status: 0 when every run passed.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
mirror=${DISTDL_MIRROR:-/work/.mirror/distdl+distdl/repo}
commit=${DISTDL_COMMIT:-a641638}
pybuild=$(realpath -m "${DISTOP_PY_BUILD_DIR:-build-python}")
venv=$pybuild/venv
python=$venv/bin/python
if [ ! -x "$python" ]; then
  echo "distdl-tests: no venv at $venv; run scripts/python-test.sh first" >&2
  exit 2
fi
if ! git -C "$mirror" cat-file -e "$commit^{commit}" 2>/dev/null; then
  echo "distdl-tests: DistDL's commit $commit is not in $mirror (DISTDL_MIRROR)" >&2
  exit 2
fi
work=${DISTDL_TESTS_DIR:-$(mktemp -d /tmp/distdl-tests.XXXXXX)}
case "$(realpath -m "$work")/" in
  "$(realpath "$PWD")"/*) echo "distdl-tests: $work is inside the repository" >&2; exit 2 ;;
esac
mkdir -p "$work"
rm -rf "$work/tests" "$work/logs"
git -C "$mirror" archive "$commit" tests | tar -x -C "$work"
find "$work/tests" -name '*.py' -exec sed -E -i \
  's/^(\s*)from distdl([. ])/\1from distop.distdl\2/; s/^(\s*)import distdl$/\1from distop import distdl/; s/^(\s*)import distdl\./\1import distop.distdl./' {} +
echo "distdl-tests: DistDL's tests at $commit in $work/tests, imports rewritten"

[ -d "$work/site/pytest_mpi" ] ||
  "$python" -m pip install -q --disable-pip-version-check --target "$work/site" "pytest<8" pytest-mpi
export PYTHONPATH=$work/site${PYTHONPATH:+:$PYTHONPATH}
# mpi4py's binary wheel finds MPICH by upstream's name (scripts/python-test.sh makes the link).
export LD_LIBRARY_PATH=$venv/lib/mpich${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONDONTWRITEBYTECODE=1

mkdir -p "$work/logs"
status=0
for folder in ${DISTDL_FOLDERS:-primitives layers sequential_layers}; do
  for n in ${DISTDL_RANKS:-1 2 3 4}; do
    log=$work/logs/${folder//\//_}.np$n
    start=$(date +%s)
    (cd "$work/tests" && timeout "${DISTDL_TIMEOUT:-900}" mpiexec.mpich -n "$n" bash -c \
      'exec "$0" -m pytest --with-mpi -q -p no:cacheprovider -rfE --continue-on-collection-errors "$@" > "'"$log"'.rank$PMI_RANK.txt" 2>&1' \
      "$python" "$folder" "$@")
    rc=$?
    [ $rc -eq 0 ] || status=1
    summary=$(grep -E '^(=+ )?[0-9]+ (passed|failed|skipped|error)|no tests ran' "$log.rank0.txt" | tail -n 1)
    echo "distdl-tests: $folder at $n rank(s): ${summary:-no summary (exit $rc)} ($(( $(date +%s) - start )) s)"
  done
done
echo "distdl-tests: reports in $work/logs"
exit $status
