#!/usr/bin/env bash
# The README's first command: builds gatehouse and its four helpers (release) and runs
# `gatehouse demo` on the embedded defaults. Arguments go to the demo (e.g. --interactive, --json).
#
# One script rather than `cargo run --bin gatehouse`: cargo builds only the binary it runs, and
# the broker starts each helper from its own binary beside it, so all five must be built.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
  echo "demo: cargo is not installed; install a Rust toolchain (https://rustup.rs) and run this again" >&2
  exit 1
fi
if [[ $(uname -s) != Linux ]]; then
  echo "demo: gatehouse confines its helpers on Linux today; $(uname -s) is not supported yet" >&2
  exit 1
fi
if ! command -v cc >/dev/null 2>&1; then
  echo "demo: no C compiler (cc) found; the bundled SQLite and ring need one (Debian/Ubuntu: apt-get install build-essential)" >&2
  exit 1
fi

echo "demo: building gatehouse and its helpers (release; the first build takes a few minutes)" >&2
cargo build --release --locked -q \
  --bin gatehouse --bin gatehouse-broker --bin gatehouse-mcp --bin gatehouse-notify --bin gatehouse-spawner \
  --bin fs-helper --bin net-helper --bin exec-helper --bin secrets-helper --bin servers-helper
exec "${CARGO_TARGET_DIR:-target}/release/gatehouse" demo "$@"
