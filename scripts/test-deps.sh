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
  [secret-tool]=libsecret-tools
  [dbus-send]=dbus-bin
  [dbus-daemon]=dbus-daemon
  [runuser]=util-linux
  [python3]=python3
  [strace]=strace
  [keyctl]=keyutils
  [jq]=jq
  # The other operating systems (scripts/cross-check.sh): the C parts of the Windows build,
  # and Wine to run the Windows test binaries.
  [x86_64-w64-mingw32-gcc]=gcc-mingw-w64-x86-64
  # (wine: Debian's launcher; it brings wine64 as its first alternative.)
  [wine]=wine
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
# unprivileged test user cannot reach a Python under /root). This venv holds the 1.x line
# (initialize handshake only); /opt/gatehouse-test-venv-mcp2 below holds the 2.x line.
VENV=/opt/gatehouse-test-venv
if [[ ! -x $VENV/bin/python ]] || ! "$VENV/bin/python" -c 'import importlib.metadata as m; assert m.version("mcp").startswith("1.")' >/dev/null 2>&1; then
  if ! /usr/bin/python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
  fi
  echo "test-deps: creating $VENV with the mcp package"
  /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
  "$VENV/bin/python" -m pip install -q 'mcp>=1.0,<2' >/dev/null
fi

# The 2.x line of the MCP Python SDK (it speaks 2026-07-28 without a handshake as well as the
# initialize handshake): the gateway's tests drive `gatehouse mcp` with both lines.
VENV2=/opt/gatehouse-test-venv-mcp2
if [[ ! -x $VENV2/bin/python ]] || ! "$VENV2/bin/python" -c 'import importlib.metadata as m; assert m.version("mcp").startswith("2.")' >/dev/null 2>&1; then
  echo "test-deps: creating $VENV2 with the mcp package (2.x)"
  /usr/bin/python3 -m venv "$VENV2"
  "$VENV2/bin/python" -m pip install -q --upgrade pip >/dev/null
  "$VENV2/bin/python" -m pip install -q 'mcp>=2,<3' >/dev/null
fi

# The official OpenTelemetry protobuf definitions (Python), for the loopback OTLP/HTTP receiver
# that decodes what `gatehouse audit export --otlp` sends (tests/otlp/receiver.py).
OTLP_VENV=/opt/gatehouse-test-venv-otlp
OTLP_PROTO_VERSION=1.45.2
if [[ ! -x $OTLP_VENV/bin/python ]] || ! "$OTLP_VENV/bin/python" -c "import importlib.metadata as m; assert m.version('opentelemetry-proto') == '$OTLP_PROTO_VERSION'" >/dev/null 2>&1; then
  echo "test-deps: creating $OTLP_VENV with opentelemetry-proto $OTLP_PROTO_VERSION"
  /usr/bin/python3 -m venv "$OTLP_VENV"
  "$OTLP_VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
  "$OTLP_VENV/bin/python" -m pip install -q "opentelemetry-proto==$OTLP_PROTO_VERSION" >/dev/null
  chmod -R a+rX "$OTLP_VENV"
fi

# zig, the C compiler of the Apple targets' C parts (ring, SQLite) in scripts/cross-check.sh.
ZIG_VENV=/opt/gatehouse-test-venv-zig
ZIG_VERSION=0.17.1
if [[ ! -x $ZIG_VENV/bin/python ]] || ! "$ZIG_VENV/bin/python" -c "import importlib.metadata as m; assert m.version('ziglang') == '$ZIG_VERSION'" >/dev/null 2>&1; then
  echo "test-deps: creating $ZIG_VENV with ziglang $ZIG_VERSION"
  /usr/bin/python3 -m venv "$ZIG_VENV"
  "$ZIG_VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
  "$ZIG_VENV/bin/python" -m pip install -q "ziglang==$ZIG_VERSION" >/dev/null
fi

# The Rust standard library for the other operating systems' targets.
if command -v rustup >/dev/null 2>&1; then
  for t in x86_64-pc-windows-gnu x86_64-apple-darwin aarch64-apple-darwin; do
    rustup target list --installed | grep -qx "$t" || rustup target add "$t" >/dev/null
  done
fi

# The unprivileged user the integration tests also run as.
if [[ $(id -u) -eq 0 ]] && ! id "$TEST_USER" >/dev/null 2>&1; then
  echo "test-deps: creating user $TEST_USER"
  useradd --create-home --shell /bin/bash "$TEST_USER"
fi

# --- agent CLIs (tests/agents) ---
# The real Claude Code and Codex CLIs that tests/agents and the end-to-end tests drive, from npm,
# into a prefix every user can read and run (the unprivileged test user too). Both packages ship
# native binaries, so nothing is downloaded at run time and node v20 is enough even though
# claude-code declares engines.node >= 22 (npm only warns): Claude Code's postinstall copies its
# glibc ELF (optional dependency @anthropic-ai/claude-code-linux-x64) over bin/claude.exe; Codex's
# bin/codex.js (node) execs the static musl ELF in @openai/codex-linux-x64. Pinned exactly; on a
# bump keep the major lines (claude-code 2.x, codex 0.x) and re-run tests/agents/try_agents.sh.
AGENT_NPM=/opt/gatehouse-test-npm
CLAUDE_CODE_VERSION=2.1.332
CODEX_VERSION=0.171.0
agent_version() { "$AGENT_NPM/bin/$1" --version 2>/dev/null | grep -oE '[0-9]+\.[0-9]+\.[0-9]+' | head -1; }
if [[ $(agent_version claude) != "$CLAUDE_CODE_VERSION" || $(agent_version codex) != "$CODEX_VERSION" ]]; then
  if ! command -v npm >/dev/null 2>&1; then
    if [[ $(id -u) -ne 0 ]]; then
      echo "test-deps: npm is missing and not root to install it" >&2
      exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
  fi
  echo "test-deps: installing Claude Code $CLAUDE_CODE_VERSION and Codex $CODEX_VERSION into $AGENT_NPM"
  mkdir -p "$AGENT_NPM"
  (cd /tmp && umask 022 && npm install -g --prefix "$AGENT_NPM" --no-fund --no-audit --loglevel=error \
    --allow-scripts=@anthropic-ai/claude-code \
    "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION" "@openai/codex@$CODEX_VERSION" >/dev/null)
  chmod -R a+rX "$AGENT_NPM"
  # A claude.exe left as the package's placeholder (postinstall not run) fails here.
  [[ $(agent_version claude) == "$CLAUDE_CODE_VERSION" ]] || { echo "test-deps: claude not runnable" >&2; exit 1; }
  [[ $(agent_version codex) == "$CODEX_VERSION" ]] || { echo "test-deps: codex not runnable" >&2; exit 1; }
fi
# --- end agent CLIs ---

# --- third-party MCP servers (tests/tests/mcp_servers.rs) ---
# The reference servers from npm and one from PyPI, into prefixes every user can read: the
# tests run them confined behind gatehouse (tools pinned, calls through the policy).
MCP_NPM=/opt/gatehouse-test-mcp-npm
MCP_SERVERS_VERSION=2026.8.31
if [[ ! -f $MCP_NPM/lib/node_modules/@modelcontextprotocol/server-memory/package.json ]] \
   || ! grep -q "\"version\": \"$MCP_SERVERS_VERSION\"" "$MCP_NPM/lib/node_modules/@modelcontextprotocol/server-memory/package.json"; then
  echo "test-deps: installing the MCP reference servers $MCP_SERVERS_VERSION into $MCP_NPM"
  mkdir -p "$MCP_NPM"
  (cd /tmp && umask 022 && npm install -g --prefix "$MCP_NPM" --no-fund --no-audit --loglevel=error \
    "@modelcontextprotocol/server-memory@$MCP_SERVERS_VERSION" \
    "@modelcontextprotocol/server-filesystem@$MCP_SERVERS_VERSION" \
    "@modelcontextprotocol/server-everything@$MCP_SERVERS_VERSION" >/dev/null)
  chmod -R a+rX "$MCP_NPM"
fi
MCP_PY=/opt/gatehouse-test-venv-mcp-servers
if [[ ! -x $MCP_PY/bin/mcp-server-time ]]; then
  echo "test-deps: creating $MCP_PY with mcp-server-time"
  /usr/bin/python3 -m venv "$MCP_PY"
  "$MCP_PY/bin/python" -m pip install -q --upgrade pip >/dev/null
  "$MCP_PY/bin/python" -m pip install -q 'mcp-server-time==2026.10.19' >/dev/null
  chmod -R a+rX "$MCP_PY"
fi
# --- end third-party MCP servers ---
