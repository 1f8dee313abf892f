#!/usr/bin/env bash
# Installs what the test suite needs when it is missing: Debian packages, Python packages, and
# an unprivileged user to run the integration tests as. Safe to run again; does nothing when
# everything is there.
set -euo pipefail

TEST_USER="${GATEHOUSE_TEST_USER:-gatehouse-test}"

# command -> Debian package
declare -A NEED=(
  [sqlite3]=sqlite3
  [curl]=curl
  [socat]=socat
  [bwrap]=bubblewrap
  [tmux]=tmux
  [dbus-run-session]=dbus
  [gnome-keyring-daemon]=gnome-keyring
  [runuser]=util-linux
  [python3]=python3
  [strace]=strace
)
missing=()
for cmd in "${!NEED[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("${NEED[$cmd]}")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "test-deps: missing packages ${missing[*]} and not root to install them" >&2
    exit 1
  fi
  echo "test-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The official MCP Python SDK, in a venv of the system Python that every user can run (the
# unprivileged test user cannot reach a Python under /root).
VENV=/opt/gatehouse-test-venv
if [[ ! -x $VENV/bin/python ]] || ! "$VENV/bin/python" -c 'import mcp' >/dev/null 2>&1; then
  if ! /usr/bin/python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
  fi
  echo "test-deps: creating $VENV with the mcp package"
  /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
  "$VENV/bin/python" -m pip install -q 'mcp>=1.0' >/dev/null
fi

# The unprivileged user the integration tests also run as.
if [[ $(id -u) -eq 0 ]] && ! id "$TEST_USER" >/dev/null 2>&1; then
  echo "test-deps: creating user $TEST_USER"
  useradd --create-home --shell /bin/bash "$TEST_USER"
fi
