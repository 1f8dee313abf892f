#!/usr/bin/env bash
# The other operating systems, as far as this Linux machine can prove them (issue 19):
#   1. clippy (-D warnings) of the whole workspace, every target, for x86_64-pc-windows-gnu and
#      x86_64-apple-darwin, and a build of its libraries and binaries for aarch64-apple-darwin,
#      linked, with the C parts (ring, SQLite) built by Debian's mingw-w64 for Windows and zig
#      (PyPI's ziglang) for the Apple targets;
#   2. the platform-independent tests built for Windows and run under Wine: the wire types and
#      protected paths, the policy engine, the proposal and audit crates, the gateway's MCP
#      layer, the console's model, the net-helper's address and URL checks, the secrets
#      helper's options, and the sandbox crate (profile generation, golden files, and the
#      Windows applier's own test, which says what Wine does not enforce); and four helper
#      binaries as the Windows spawner starts them, confined by the applier: the secrets-helper
#      serving over its pipe against the Credential Manager, the net-helper fetching over its
#      overlapped pipe from loopback servers, the exec-helper running commands in the
#      restricted-token tier, the fs-helper reading and changing files beneath its grants; the Windows spawner, started as the router starts it, starting,
#      observing, tracing and killing the secrets-helper for this test as its router; and the
#      broker itself, started for a private --data-dir and driven over its pipes, with
#      gatehouse-mcp serving an agent's MCP client on stdio in front of it, `gatehouse sandbox`
#      running commands through it, and the notifier handing a waiting card to its hook.
# Nothing here runs a macOS binary: there is no Mac here (and no macOS SDK: zig's libSystem and
# two framework stubs stand for it at link time).
# scripts/test-deps.sh installs the toolchains; CI runs this from scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}

# zig cc for the Apple targets. cc-rs passes clang's spelling of the target, which zig's own
# parser refuses, so the wrapper drops it and names the target zig's way.
ZIG_PY=${GATEHOUSE_ZIG_PYTHON:-/opt/gatehouse-test-venv-zig/bin/python}
ZIGCC=$TARGET_DIR/zigcc
mkdir -p "$ZIGCC"
for t in x86_64 aarch64; do
  cat >"$ZIGCC/cc-$t-apple-darwin" <<SH
#!/bin/sh
for a in "\$@"; do
  shift
  case "\$a" in
    --target=*|-mmacosx-version-min=*) ;;
    *) set -- "\$@" "\$a" ;;
  esac
done
exec $ZIG_PY -m ziglang cc -target $t-macos "\$@"
SH
  chmod +x "$ZIGCC/cc-$t-apple-darwin"
done
export CC_x86_64_apple_darwin=$ZIGCC/cc-x86_64-apple-darwin
export CC_aarch64_apple_darwin=$ZIGCC/cc-aarch64-apple-darwin
export AR_x86_64_apple_darwin="$ZIG_PY -m ziglang ar" AR_aarch64_apple_darwin="$ZIG_PY -m ziglang ar"

for t in x86_64-pc-windows-gnu x86_64-apple-darwin; do
  echo "== clippy for $t (at ${SECONDS}s)"
  cargo clippy --workspace --all-targets --all-features --target "$t" -q -- -D warnings
done
# The Apple Silicon build: the same Rust cfg as x86_64 macOS (which clippy checked above, tests
# and all), so what is left to prove is that the libraries and binaries build and link for the
# arch (the C parts, any dependency's arch-specific code, every symbol found in the system's
# libraries). Linked by zig against its libSystem.tbd and, for the secrets-helper's Keychain,
# the import stubs of scripts/macos-frameworks (its README says what they are). The linker
# wrapper drops `-liconv`, which std names on every Apple target and zig does not ship: nothing
# here calls iconv, and a call would fail the link as an undefined symbol. SDKROOT names zig's
# Darwin directory for the link only, so rustc does not look for Xcode.
cat >"$ZIGCC/ld-aarch64-apple-darwin" <<SH
#!/bin/sh
for a in "\$@"; do
  shift
  case "\$a" in
    -liconv) ;;
    *) set -- "\$@" "\$a" ;;
  esac
done
exec "$ZIGCC/cc-aarch64-apple-darwin" -F "$ROOT/scripts/macos-frameworks" "\$@"
SH
chmod +x "$ZIGCC/ld-aarch64-apple-darwin"
echo "== build and link for aarch64-apple-darwin (at ${SECONDS}s)"
ZIG_DARWIN=$("$ZIG_PY" -c 'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "lib", "libc", "darwin"))')
SDKROOT=$ZIG_DARWIN CARGO_TARGET_AARCH64_APPLE_DARWIN_LINKER=$ZIGCC/ld-aarch64-apple-darwin \
  cargo build --workspace --all-features --target aarch64-apple-darwin -q
# Each binary is an arm64 Mach-O executable that loads libSystem and nothing else, but for the
# secrets-helper, which loads the two frameworks too.
scripts/macho-check.py "$TARGET_DIR/aarch64-apple-darwin/debug"

echo "== platform-independent tests for Windows, under Wine (at ${SECONDS}s)"
export WINEDEBUG=-all WINEPREFIX=${WINEPREFIX:-$TARGET_DIR/wineprefix}
# (The runner retries once a binary that failed before printing anything: scripts/wine-runner.sh.)
export CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER=$ROOT/scripts/wine-runner.sh
CARGO_TARGET_DIR=$TARGET_DIR sandbox/tests/wine/setup.sh >/dev/null
# One persistent wineserver for the whole run: otherwise each test binary's exit may start the
# server's shutdown while the next binary connects ("wine client error: recvmsg: Connection
# reset by peer").
wineboot -i >/dev/null 2>&1
wineserver -w
wineserver -p
trap 'wineserver -k 2>/dev/null || true' EXIT
WINE_CRATES=(-p ipc-schema -p gatehouse-policy -p gatehouse-proposal -p audit-store -p audit-export
  -p gateway -p ui -p net-helper -p secrets-helper -p gatehouse-client -p sandbox -p spawner
  -p gatehouse-notify -p servers-helper)
LOG=$TARGET_DIR/wine-tests.log
# (--all-features: the helpers' test hooks, as on Linux; the net-helper's Wine test needs one.
# --show-output: a passing test's "wine does not enforce" line is printed after the results.)
# (The exec-helper has no library: its binary's unit tests come with --tests. The broker's test
# starts the spawner, net-, secrets-, servers- and exec-helper, gatehouse-mcp and gatehouse
# binaries: the first run builds the first four (each has an integration test of its own), the
# second the exec-helper and the broker; `cargo test` builds a package's binaries only for its
# own integration tests, so gatehouse-mcp's, the command line's, the notifier's and the
# fs-helper's (its Windows code is fs-helper-windows, whose test and the broker's start it) are
# built explicitly, and the tests crate's stdio MCP server, which the broker's test starts.)
if ! { cargo test --target x86_64-pc-windows-gnu "${WINE_CRATES[@]}" --all-features --lib --tests \
    -- --show-output &&
  cargo build --target x86_64-pc-windows-gnu -p gatehouse-mcp -p gatehouse-cli -p gatehouse-notify -p fs-helper -p gatehouse-tests --bins --all-features &&
  cargo test --target x86_64-pc-windows-gnu -p exec-helper -p gatehouse-mcp -p gatehouse-cli -p broker -p fs-helper-windows --all-features --tests \
    -- --show-output; } >"$LOG" 2>&1; then
  grep -E -A20 '^---- |^error' "$LOG" >&2 || tail -50 "$LOG" >&2
  echo "the Windows tests under Wine FAILED" >&2
  exit 1
fi
grep -cE '^test .* ok$' "$LOG" | sed 's/^/tests passed under Wine: /'
grep -E 'wine does not enforce' "$LOG" | sort -u || true
grep -E '^wine-runner: ' "$LOG" || true
