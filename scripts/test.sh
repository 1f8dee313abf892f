#!/usr/bin/env bash
# The whole test suite, as CI runs it: installs what is missing, checks formatting and lints,
# builds the test binaries, runs the README's demo on a fresh clone (whose release build the
# tests then check), runs every test as the invoking user and then (when run as root) again as
# an unprivileged user, because root passes checks a real user fails.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TEST_USER="${GATEHOUSE_TEST_USER:-gatehouse-test}"

scripts/test-deps.sh

echo "== fmt and clippy (at ${SECONDS}s)"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --all-features -q -- -D warnings
scripts/size-check.sh

echo "== the other operating systems: clippy for Windows and macOS, the portable tests under Wine (at ${SECONDS}s)"
scripts/cross-check.sh

echo "== build (at ${SECONDS}s)"
cargo build --workspace --all-features -q

echo "== the README's first command, on a fresh clone (at ${SECONDS}s)"
# Exactly as a new user runs it: a clone of what is committed, nothing built before. Its release
# build is also the one the tests check for test-only switches (a test build carries them,
# feature test-hooks; a release build must not): what a user gets, built once.
FRESH=$(mktemp -d /tmp/gatehouse-fresh.XXXXXX)
CLEANUP=("$FRESH")
trap 'rm -rf "${CLEANUP[@]}"' EXIT
git clone -q "$ROOT" "$FRESH/gatehouse"
if ! (cd "$FRESH/gatehouse" && env -u CARGO_TARGET_DIR ./scripts/demo.sh) >"$FRESH/demo.log" 2>&1; then
  cat "$FRESH/demo.log" >&2
  echo "the README's first command FAILED on a fresh clone" >&2
  exit 1
fi
grep -q "all 10 outcomes as expected" "$FRESH/demo.log" || { cat "$FRESH/demo.log" >&2; exit 1; }
tail -n 2 "$FRESH/demo.log"
export GATEHOUSE_RELEASE_DIR=$FRESH/gatehouse/target/release


echo "== tests as $(id -un) (at ${SECONDS}s)"
cargo test --workspace --all-features -q 2>&1 | tee target/test-root.log

if [[ $(id -u) -eq 0 ]]; then
  echo "== tests as $TEST_USER (at ${SECONDS}s)"
  STAGE=$(mktemp -d /tmp/gatehouse-usertests.XXXXXX)
  CLEANUP+=("$STAGE")
  mkdir -p "$STAGE/target/debug/deps" "$STAGE/target/release"
  # The binaries, laid out as in target/ so the tests find them the same way.
  for b in gatehouse gatehouse-broker gatehouse-mcp gatehouse-notify gatehouse-spawner fs-helper net-helper exec-helper secrets-helper servers-helper; do
    # gatehouse-spawner comes with the spawner crate; a tree without it has nothing to copy.
    [[ -e target/debug/$b ]] || [[ $b != gatehouse-spawner ]] || continue
    cp target/debug/$b "$STAGE/target/debug/"
    cp "$GATEHOUSE_RELEASE_DIR/$b" "$STAGE/target/release/"
  done
  # Test-only binaries (the exec probe is built with the test-hooks feature; the userns
  # refusal wrapper belongs to the tests crate: the Landlock-tier runs of the escape, exec and
  # MCP server suites start their brokers under it).
  for b in gatehouse-exec-probe gatehouse-refuse-userns; do
    cp target/debug/$b "$STAGE/target/debug/"
  done
  mapfile -t EXES < <(cargo test --workspace --all-features --no-run --message-format=json -q 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["executable"])')
  for e in "${EXES[@]}"; do cp "$e" "$STAGE/target/debug/deps/"; done
  # A copy of the sources for tests that read fixtures or scripts at run time.
  mkdir -p "$STAGE/src"
  git ls-files -z | xargs -0 -I{} cp --parents {} "$STAGE/src/" 2>/dev/null || true
  # Start the test user's kernel keyrings empty. The user and persistent keyrings outlive
  # processes (until reboot), and an unprivileged user may hold 20,000 bytes of keys. Each new
  # link into a keyring reserves 4 of those bytes, and the kernel gives them back only when the
  # keyring is cleared, not when the key is removed: a purge is not enough, and after some
  # thousands of audit keys over the machine's uptime every broker of this user refused to
  # start ("adding a key: the kernel's key quota ... is used up"). This user exists for tests.
  runuser -u "$TEST_USER" -- sh -c 'keyctl clear @u && keyctl clear "$(keyctl get_persistent @s)"' ||
    { echo "could not clear $TEST_USER's keyrings" >&2; exit 1; }
  grep -E "^ *$(id -u "$TEST_USER"):" /proc/key-users || true
  # Audit keys the user holds now. A test binary that leaves any behind fails: a harness that
  # owns a data dir forgets its key (gatehouse_tests::forget_audit_key), or the quota fills
  # and every later broker refuses to start ("the audit log cannot be sealed").
  # (Each key is linked from the user keyring and the persistent one: counted once, by id.)
  audit_keys() { runuser -u "$TEST_USER" -- keyctl show @u 2>/dev/null | awk '/gatehouse:audit-key-/ { print $1 }' | sort -u | wc -l; }
  chown -R "$TEST_USER" "$STAGE"
  chmod 0755 "$STAGE"
  fail=0
  for e in "${EXES[@]}"; do
    exe="$STAGE/target/debug/deps/$(basename "$e")"
    echo "-- $(basename "$e")"
    if ! (cd /tmp && runuser -u "$TEST_USER" -- env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$(getent passwd "$TEST_USER" | cut -d: -f6)" \
        LANG=C.UTF-8 GATEHOUSE_SOURCE_DIR="$STAGE/src" "$exe" -q 2>&1); then
      fail=1
    fi
    # (Invalidated keys leave the keyring when the kernel's key collector runs: at once, but
    # asynchronously, so a count taken the instant the binary exits gets one more look.)
    left=$(audit_keys)
    ((left == 0)) || { sleep 1; left=$(audit_keys); }
    if ((left > 0)); then
      echo "$(basename "$e") left $left audit keys in $TEST_USER's keyring" >&2
      runuser -u "$TEST_USER" -- keyctl purge -p user gatehouse: >/dev/null 2>&1 || true
      fail=1
    fi
  done
  if ((fail)); then
    echo "tests as $TEST_USER FAILED" >&2
    exit 1
  fi
fi
echo "== all tests passed (in ${SECONDS}s)"
