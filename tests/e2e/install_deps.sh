#!/usr/bin/env bash
# tools/install-deps.sh: finds everything on this machine quickly; as an unprivileged user it reports
# what is missing (with a Spack spec) and exits 1; it never installs in test mode; the root install
# path calls apt-get once for update and once for exactly the missing packages (apt-get stubbed).
set -euo pipefail

SOURCE_DIR=${SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
SCRIPT=$SOURCE_DIR/tools/install-deps.sh
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
chmod 755 "$WORK"

fail() {
  echo "FAIL: $*" >&2
  [[ -f $WORK/out ]] && sed 's/^/  | /' "$WORK/out" >&2
  exit 1
}

# Runs the script (extra env assignments as arguments) as an unprivileged user where we are root;
# sets RC and leaves the output in $WORK/out.
run_unprivileged() {
  local -a as_user=()
  [[ $EUID -eq 0 ]] && as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups)
  RC=0
  (cd "$WORK" && "${as_user[@]}" env "$@" bash "$SCRIPT") >"$WORK/out" 2>&1 || RC=$?
}

expect_in_output() {
  local want
  for want in "$@"; do grep -qF -- "$want" "$WORK/out" || fail "output lacks '$want'"; done
}

# 1. Everything present: exit 0, one line, fast.
start=$(date +%s%N)
RC=0
bash "$SCRIPT" >"$WORK/out" 2>&1 || RC=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
[[ $RC -eq 0 ]] || fail "exit $RC with every dependency installed"
[[ $(wc -l <"$WORK/out") -eq 1 ]] || fail "more than one line when nothing is missing"
expect_in_output "all present"
(( ms < 3000 )) || fail "took $ms ms with nothing to do"

# 2. The same as an unprivileged user.
run_unprivileged
[[ $RC -eq 0 ]] || fail "exit $RC as an unprivileged user with every dependency installed"

# 3. Unprivileged with parallel HDF5 "missing": the table, exit 1.
run_unprivileged MPITRAIN_DEPS_ASSUME_MISSING=hdf5
[[ $RC -eq 1 ]] || fail "exit $RC, expected 1, with hdf5 missing"
expect_in_output "missing 1 of" "hdf5" "hdf5+mpi" "spack install" "module load hdf5/parallel" \
  "module avail" "libhdf5-openmpi-dev" "HDF5_ROOT"
[[ $EUID -ne 0 ]] || expect_in_output "not root"
grep -q "^  openblas " "$WORK/out" && fail "openblas listed although present"

# 4. Two missing, space-separated.
run_unprivileged MPITRAIN_DEPS_ASSUME_MISSING="gtest openblas"
[[ $RC -eq 1 ]] || fail "exit $RC, expected 1, with gtest and openblas missing"
expect_in_output "missing 2 of" "googletest" "openblas threads=openmp" "OPENBLAS_ROOT" \
  "CMAKE_PREFIX_PATH"
grep -q "^  hdf5 " "$WORK/out" && fail "hdf5 listed although present"

# A stub apt-get first on PATH records its calls: nothing here may reach the real one.
mkdir "$WORK/bin"
cat >"$WORK/bin/apt-get" <<STUB
#!/usr/bin/env bash
echo "DEBIAN_FRONTEND=\${DEBIAN_FRONTEND:-} \$*" >>"$WORK/apt-calls"
STUB
chmod 755 "$WORK/bin/apt-get"
STUB_PATH=$WORK/bin:$PATH

# 5. Test mode never installs, even where it could.
RC=0
PATH=$STUB_PATH MPITRAIN_DEPS_ASSUME_MISSING=mpi bash "$SCRIPT" >"$WORK/out" 2>&1 || RC=$?
[[ $RC -eq 1 ]] || fail "exit $RC, expected 1, in test mode"
expect_in_output "openmpi" "spack install openmpi"
[[ ! -e $WORK/apt-calls ]] || fail "test mode called apt-get"

# 6. Debian as root with a compiler missing (CXX points nowhere): apt-get update, then install of
#    exactly g++; the stub installs nothing, so the script still finds it missing and exits 1.
if [[ $EUID -eq 0 && -f /etc/debian_version ]]; then
  RC=0
  PATH=$STUB_PATH CXX=/nonexistent/c++ bash "$SCRIPT" >"$WORK/out" 2>&1 || RC=$?
  [[ $RC -eq 1 ]] || fail "exit $RC, expected 1, when the install does not help"
  expect_in_output "installing g++" "still missing" "compiler"
  [[ $(wc -l <"$WORK/apt-calls") -eq 2 ]] || fail "expected 2 apt-get calls: $(cat "$WORK/apt-calls")"
  grep -q "^DEBIAN_FRONTEND=noninteractive -qq update$" "$WORK/apt-calls" ||
    fail "no quiet noninteractive apt-get update: $(cat "$WORK/apt-calls")"
  grep -qE "^DEBIAN_FRONTEND=noninteractive .*install -y .* g\+\+$" "$WORK/apt-calls" ||
    fail "apt-get install not of exactly g++: $(cat "$WORK/apt-calls")"
fi

echo "install_deps: ok"
