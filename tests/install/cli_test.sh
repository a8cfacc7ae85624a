#!/usr/bin/env bash
# ctest cli.conventions: the command-line conventions of every binary (cohort/base/cli11.h for the
# CLI11 ones, launcher/plan/cli.cc for cohortrun), table-driven:
#   --version prints "<binary> <version> (git <revision>)" and exits 0;
#   each usage error exits 2 with one line on stderr that names the offending flag;
#   --help shows typed placeholders, never CLI11's TEXT/INT/FLOAT;
#   --print-completion bash prints a completion script;
# a worker's ModuleNotFoundError names its interpreter in the failure summary;
# and cohortd configured only through COHORTD_* variables, and only through a --config file.
#   cli_test.sh <bin dir> <version> <work dir>
set -euo pipefail
bin=$1 version=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

binaries=(cohortrun cohortd cohortctl cohort-train-fmnist cohort-train-gpt)

for b in "${binaries[@]}"; do
  [[ -x $bin/$b ]] || { fail "$bin/$b not built"; continue; }
  out=$("$bin/$b" --version) || fail "$b --version exited $?"
  [[ $out =~ ^$b\ $version\ \(git\ [^\)]+\)$ ]] || fail "$b --version printed '$out'"
  comp=$("$bin/$b" --print-completion bash) || fail "$b --print-completion bash exited $?"
  grep -q "^complete -F _${b//-/_} $b\$" <<<"$comp" || fail "$b --print-completion bash: no complete line"
  grep -q -- "--version" <<<"$comp" || fail "$b --print-completion bash does not offer --version"
  help=$("$bin/$b" --help) || fail "$b --help exited $?"
  if grep -qE ' (TEXT|INT|UINT|FLOAT)( |=|,|$)' <<<"$help"; then
    fail "$b --help has untyped placeholders: $(grep -E ' (TEXT|INT|UINT|FLOAT)( |=|,|$)' <<<"$help")"
  fi
done

# binary | arguments | the flag the one-line error must name
usage_errors=(
  "cohortrun|--bogus x.py|--bogus"
  "cohortrun|--nproc-per-node abc x.py|--nproc-per-node"
  "cohortd|--bogus|--bogus"
  "cohortd|--port abc|--port"
  "cohortd|--port 70000|--port"
  "cohortd|--handshake-timeout -1|--handshake-timeout"
  "cohortd|--first-request-timeout -1|--first-request-timeout"
  "cohortd|--idle-timeout -1|--idle-timeout"
  "cohortd|--fsync sometimes|--fsync"
  "cohortd|--allow-unauthenticated-from 10.0.0.0/8|--allow-unauthenticated-from"
  "cohortd|--config $work/missing.toml|missing.toml"
  "cohortctl|status --store 127.0.0.1:1 --interval abc|--interval"
  "cohortctl|status --json|--store"
  "cohort-train-fmnist|--bogus|--bogus"
  "cohort-train-fmnist|--epochs abc|--epochs"
  "cohort-train-gpt|--bogus|--bogus"
  "cohort-train-gpt|--max-steps|--max-steps"
  "cohort-train-gpt|--precision bf32|--precision"
  "cohort-train-fmnist|--precision fp8|--precision"
)
for row in "${usage_errors[@]}"; do
  IFS='|' read -r b args flag <<<"$row"
  read -ra argv <<<"$args"
  rc=0
  "$bin/$b" "${argv[@]}" >"$work/out" 2>"$work/err" </dev/null || rc=$?
  lines=$(grep -c . "$work/err" || true)
  if [[ $rc != 2 ]]; then
    fail "$b $args: exit $rc, want 2 (stderr: $(cat "$work/err"))"
  elif [[ $lines != 1 ]]; then
    fail "$b $args: $lines lines on stderr, want 1: $(cat "$work/err")"
  elif ! grep -qF -- "$flag" "$work/err"; then
    fail "$b $args: the error does not name $flag: $(cat "$work/err")"
  fi
done

# A Python worker that dies of ModuleNotFoundError: the failure summary names the interpreter that
# ran it, however it was chosen (cohortrun --help: PYTHON_EXEC, else python3 on PATH here).
echo 'import cohort_cli_test_no_such_module' >"$work/missing_module.py"
python3_on_path=$(command -v python3)
# row: label | PYTHON_EXEC ("" for none) | what the summary must say
interpreter_rows=(
  "PATH||the workers ran under python3 ($python3_on_path, the first on PATH)"
  "PYTHON_EXEC|$python3_on_path|the workers ran under PYTHON_EXEC=$python3_on_path"
)
for row in "${interpreter_rows[@]}"; do
  IFS='|' read -r label python_exec want <<<"$row"
  rc=0
  if [[ -n $python_exec ]]; then
    PYTHON_EXEC=$python_exec "$bin/cohortrun" --nproc-per-node 1 "$work/missing_module.py" \
      >"$work/missing.out" 2>&1 </dev/null || rc=$?
  else
    env -u PYTHON_EXEC "$bin/cohortrun" --nproc-per-node 1 "$work/missing_module.py" \
      >"$work/missing.out" 2>&1 </dev/null || rc=$?
  fi
  if [[ $rc != 1 ]]; then
    fail "ModuleNotFoundError ($label): cohortrun exited $rc, want 1: $(cat "$work/missing.out")"
  elif ! grep -qF "$want" "$work/missing.out"; then
    fail "ModuleNotFoundError ($label): the summary does not say '$want': $(cat "$work/missing.out")"
  fi
done

# cohortd started with its settings from one source only; it must write the port file it was told
# of, with the port it was told (0: a free one, so the first line of stdout says which).
wait_for_file() {  # wait_for_file <path> <pid>: up to 10 s, while the process lives
  local deadline=$((SECONDS + 10))
  while [[ ! -s $1 ]]; do
    kill -0 "$2" 2>/dev/null || return 1
    ((SECONDS < deadline)) || return 1
    sleep 0.05
  done
}
check_cohortd() {  # check_cohortd <label> <port file> <env assignments...>
  local label=$1 portfile=$2
  shift 2
  env "$@" "$bin/cohortd" >"$work/$label.out" 2>&1 </dev/null &
  local pid=$!
  if wait_for_file "$portfile" "$pid"; then
    local port
    port=$(cat "$portfile")
    [[ $port =~ ^[0-9]+$ && $port != 0 ]] || fail "$label: port file holds '$port'"
    grep -q ":$port\$" <(head -1 "$work/$label.out") ||
      fail "$label: stdout's first line is not the address with port $port: $(head -1 "$work/$label.out")"
    grep -q 'token required' "$work/$label.out" || fail "$label: the token file was not read"
  else
    fail "$label: no port file $portfile: $(cat "$work/$label.out")"
  fi
  kill "$pid" 2>/dev/null || true
  wait "$pid" || true
}
echo cli-test-token-of-more-than-sixteen-bytes >"$work/token"
chmod 600 "$work/token"  # cohortd refuses tokens under 16 bytes and warns on readable files
check_cohortd env "$work/env.port" COHORTD_HOST=127.0.0.1 COHORTD_PORT=0 \
  COHORTD_PORT_FILE="$work/env.port" COHORTD_AUTH_TOKEN_FILE="$work/token" COHORTD_FSYNC=never
cat >"$work/cohortd.toml" <<TOML
host = "127.0.0.1"
port = 0
port-file = "$work/config.port"
auth-token-file = "$work/token"
fsync = "never"
TOML
check_cohortd config-env "$work/config.port" COHORTD_CONFIG="$work/cohortd.toml"
rm -f "$work/config.port"
# --config on the command line (through env's argument list, no COHORTD_* variables at all)
env -u COHORTD_CONFIG "$bin/cohortd" --config "$work/cohortd.toml" >"$work/config-flag.out" 2>&1 </dev/null &
pid=$!
wait_for_file "$work/config.port" "$pid" || fail "config-flag: no port file: $(cat "$work/config-flag.out")"
kill "$pid" 2>/dev/null || true
wait "$pid" || true

if ((failures)); then
  echo "cli_test: $failures failures" >&2
  exit 1
fi
echo "cli_test: all passed"
