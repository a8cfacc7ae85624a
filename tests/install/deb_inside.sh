#!/bin/bash
# Run by tests/install/deb_test.sh as /debs/deb_inside.sh inside the bare Debian 12 root where apt
# has just installed cohort, libcohortX.Y and libcohort-dev (and their dependencies, nothing
# else but pkgconf), with a network namespace of its own. Uses only what was installed.
set -euo pipefail
fail() { echo "deb_inside: FAIL: $*" >&2; exit 1; }
cd /tmp

# ---- the programs --------------------------------------------------------------------------------
for b in cohortrun cohortd cohortctl cohort-train-fmnist cohort-train-gpt; do
  out=$("/usr/bin/$b" --version) || fail "$b --version exited $?"
  [[ $out == "$b "[0-9]* ]] || fail "$b --version printed '$out'"
done
for f in /usr/bin/cohortrun /usr/bin/cohortd /usr/bin/cohortctl /usr/bin/cohort-train-* /usr/lib/*/libcohort.so.*; do
  if ldd "$f" | grep 'not found'; then  # grep reads it all: no SIGPIPE
    fail "$f needs libraries its package does not depend on (above)"
  fi
done
echo "deb_inside: --version and ldd ok"

# ---- 2-worker jobs under the installed cohortrun ------------------------------------------------
# The trainer (OpenBLAS from the package's dependencies), on a text every Debian root has.
out=$(cohortrun --nproc-per-node 2 --no-python cohort-train-gpt --data /usr/share/common-licenses/GPL-3 \
        --n-layer 1 --n-head 2 --n-embd 32 --block-size 32 --batch-size 2 --total-batch-tokens 128 \
        --max-steps 2 --eval-interval 2 --eval-batches 1 --metrics - --summary-json /tmp/gpt.json \
        2>&1) || fail "2-worker cohort-train-gpt failed: $out"
grep -q '"world_size": *2' /tmp/gpt.json || fail "the trainer's summary is not a 2-rank run: $(cat /tmp/gpt.json)"
echo "deb_inside: 2-worker cohort-train-gpt ok"

# A Python script: the python3 on PATH runs it, `import cohort` finds the package's module.
cat >/tmp/worker.py <<'PY'
import os, sys
import cohort
print("python worker rank %s of %s: cohort %s python %s"
      % (os.environ["RANK"], os.environ["WORLD_SIZE"], cohort.__file__, sys.executable))
PY
out=$(cohortrun --nproc-per-node 2 /tmp/worker.py 2>&1) || fail "2-worker python job failed: $out"
for r in 0 1; do
  grep -qF "python worker rank $r of 2: cohort /usr/lib/cohort/python/cohort/__init__.py python /usr/bin/python3" \
    <<<"$out" || fail "rank $r did not import the installed cohort module with /usr/bin/python3: $out"
done
echo "deb_inside: 2-worker python job ok"

# A worker that dies of ModuleNotFoundError (this root has no PyTorch): the summary says which
# interpreter ran it.
echo 'import torch' >/tmp/needs_torch.py
rc=0
out=$(cohortrun --nproc-per-node 2 /tmp/needs_torch.py 2>&1) || rc=$?
[[ $rc == 1 ]] || fail "a job whose workers cannot import torch exited $rc: $out"
grep -qF "the workers ran under python3 (/usr/bin/python3, the first on PATH)" <<<"$out" ||
  fail "the failure summary does not name the interpreter: $out"
echo "deb_inside: ModuleNotFoundError names the interpreter"

# ---- libcohort-dev -------------------------------------------------------------------------------
run2() {  # run2 <program>: a 2-rank allreduce; both ranks report the sum
  local o
  o=$(cohortrun --nproc-per-node 2 --no-python "$1" 2>&1) || fail "cohortrun $1 failed: $o"
  for r in 0 1; do
    grep -q "consumer rank $r of 2: allreduce sum 3 ok" <<<"$o" || fail "$1: no line from rank $r: $o"
  done
}
# find_package(cohort) and the static library: every dependency libcohort-dev names is used.
cmake -S /debs -B /tmp/consumer-static -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCOHORT_CONSUMER_STATIC=ON >/tmp/cmake.log 2>&1 || fail "find_package(cohort): $(tail -20 /tmp/cmake.log)"
cmake --build /tmp/consumer-static >>/tmp/cmake.log 2>&1 || fail "static build: $(tail -20 /tmp/cmake.log)"
# (ldd's output in a variable: grep -q stops reading early, and pipefail would count ldd's SIGPIPE)
libs=$(ldd /tmp/consumer-static/consumer)
if grep -q libcohort <<<"$libs"; then fail "consumer-static loads libcohort.so: $libs"; fi
run2 /tmp/consumer-static/consumer
# pkg-config and the shared library.
read -ra flags <<<"$(pkg-config --cflags --libs cohort)"
g++ -std=c++20 -O1 -o /tmp/consumer-shared /debs/main.cc "${flags[@]}" || fail "pkg-config build failed"
libs=$(ldd /tmp/consumer-shared)
grep -qE 'libcohort\.so\.[0-9.]+ => /' <<<"$libs" || fail "consumer-shared does not load libcohort.so: $libs"
run2 /tmp/consumer-shared
echo "deb_inside: libcohort-dev: find_package (static) and pkg-config (shared) ok"

# ---- the service ---------------------------------------------------------------------------------
unit=/lib/systemd/system/cohortd.service
grep -qx 'ExecStart=/usr/bin/cohortd' "$unit" || fail "$unit does not start /usr/bin/cohortd"
[[ ! -e /etc/systemd/system/multi-user.target.wants/cohortd.service ]] ||
  fail "installing enabled cohortd.service"
for p in /proc/[0-9]*; do
  if [[ /usr/bin/cohortd -ef $p/exe ]]; then fail "installing started cohortd (pid ${p#/proc/})"; fi
done
# A purge removes the store the service kept (DynamicUser's StateDirectory).
mkdir -p /var/lib/private/cohortd
echo kept >/var/lib/private/cohortd/store.log
ln -s private/cohortd /var/lib/cohortd
dpkg --purge cohort >/tmp/purge.log 2>&1 || fail "dpkg --purge cohort: $(cat /tmp/purge.log)"
[[ ! -e /usr/bin/cohortrun && ! -e $unit ]] || fail "the purge left cohort's files"
[[ ! -e /var/lib/private/cohortd && ! -L /var/lib/cohortd ]] || fail "the purge left the service's state"
echo "deb_inside: the unit installed, not enabled, not started; purged with its state"
