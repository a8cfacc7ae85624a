#!/usr/bin/env bash
# ctest install.prefix (label packaging): `cmake --install` of the release build into a fresh
# prefix; the installed files are where GNUInstallDirs puts them; an out-of-tree program
# (tests/install/consumer) builds against the prefix with find_package(cohort), shared and static,
# and with pkg-config; each build runs a 2-rank allreduce under the installed cohortrun.
#   install_test.sh <build dir> <source dir> <work dir>
set -euo pipefail
build=$1 src=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix

fail() { echo "install_test: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$prefix" >"$work/install.log" || fail "cmake --install failed"
libdir=$(sed -n 's/^libdir=\${prefix}\///p' "$build/cohort.pc")
for f in bin/cohortrun bin/cohortd bin/cohortctl include/cohort/context.h include/cohort/cpu_process_group.h \
         include/cohort/error.h include/cohort/rdzv/store.h include/cohort/base/environment.h \
         "$libdir/libcohort.a" "$libdir/libcohort.so" "$libdir/pkgconfig/cohort.pc" \
         lib/cohort/python/cohort/__init__.py \
         "$libdir/cmake/cohort/cohortConfig.cmake" "$libdir/cmake/cohort/cohortConfigVersion.cmake"; do
  [[ -e $prefix/$f ]] || fail "not installed: $f"
done
for b in cohortrun cohortd cohortctl; do
  zcat "$prefix/share/man/man1/$b.1.gz" | grep -q "^\.TH ${b^^} " || fail "no man page for $b"
  grep -q "^complete -F _$b $b\$" "$prefix/share/bash-completion/completions/$b" ||
    fail "no bash completion for $b"
done
grep -qx "ExecStart=$prefix/bin/cohortd" "$prefix/lib/systemd/system/cohortd.service" ||
  fail "cohortd.service does not start $prefix/bin/cohortd"
"$prefix/bin/cohortd" --version | grep -q "^cohortd " || fail "installed cohortd --version"

# Only the installed cohortrun and the consumer: no build tree on PATH.
run2() {  # run2 <program>: a 2-rank job; both ranks must report the sum
  local out
  out=$("$prefix/bin/cohortrun" --nproc-per-node 2 --no-python "$1" 2>&1) ||
    fail "cohortrun $1 failed: $out"
  for r in 0 1; do
    grep -q "consumer rank $r of 2: allreduce sum 3 ok" <<<"$out" ||
      fail "$1: no line from rank $r in: $out"
  done
  echo "ok: $1"
}

for kind in shared static; do
  static=OFF
  [[ $kind == static ]] && static=ON
  cmake -S "$src/tests/install/consumer" -B "$work/cmake-$kind" -G Ninja \
        -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" -DCOHORT_CONSUMER_STATIC=$static \
        >"$work/cmake-$kind.log" 2>&1 || fail "configure ($kind): $(tail -20 "$work/cmake-$kind.log")"
  cmake --build "$work/cmake-$kind" >>"$work/cmake-$kind.log" 2>&1 ||
    fail "build ($kind): $(tail -20 "$work/cmake-$kind.log")"
  run2 "$work/cmake-$kind/consumer"
done
# The shared build must really use the installed libcohort.so.
# (ldd's output in a variable: grep -q stops reading early, and pipefail would count ldd's SIGPIPE)
libs=$(ldd "$work/cmake-shared/consumer")
grep -q "$prefix/$libdir/libcohort.so" <<<"$libs" ||
  fail "consumer (shared) does not load $prefix/$libdir/libcohort.so: $libs"

export PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig
read -ra flags <<<"$(pkg-config --cflags --libs cohort)"
c++ -std=c++20 -O1 -o "$work/pkgconfig-consumer" "$src/tests/install/consumer/main.cc" "${flags[@]}" \
    -Wl,-rpath,"$prefix/$libdir" || fail "pkg-config build failed"
run2 "$work/pkgconfig-consumer"
# Static: --static adds what libcohort.a needs; -lcohort names the archive (-l:libcohort.a), else
# the linker prefers the .so beside it.
read -ra flags <<<"$(pkg-config --static --cflags --libs cohort)"
for i in "${!flags[@]}"; do
  [[ ${flags[i]} == -lcohort ]] && flags[i]=-l:libcohort.a
done
c++ -std=c++20 -O1 -o "$work/pkgconfig-static-consumer" "$src/tests/install/consumer/main.cc" \
    "${flags[@]}" || fail "pkg-config --static build failed"
libs=$(ldd "$work/pkgconfig-static-consumer")
if grep -q libcohort <<<"$libs"; then
  fail "pkgconfig-static-consumer loads libcohort.so"
fi
run2 "$work/pkgconfig-static-consumer"
echo "install_test: all passed"
