#!/usr/bin/env bash
# Manual driver: runs the real Claude Code and Codex CLIs against tests/agents/model_server.py
# with tests/agents/stub_mcp.py as their only tool source, inside a private network namespace
# (loopback only) whose /etc/resolv.conf points at a logging fake DNS on 127.0.0.1 that answers
# NXDOMAIN. So nothing can leave the machine, and every host a CLI tries to reach is logged.
#
#   sudo tests/agents/try_agents.sh [SCENARIO...]     (root; default: all scenarios)
#   scenarios: claude codex claude-tls codex-tls codex-tls-sslcertfile claude-proxy codex-proxy
#              claude-noproxy codex-noproxy claude-user codex-user claude-timeout codex-timeout
#              claude-progress codex-progress claude-chatty codex-chatty
# Output: one line per scenario (PASS/FAIL + findings), then "N passed, N failed".
# TRY_MCP_DELAY=<s> makes the stub MCP server start that much later.
# TRY_NO_CA=1 leaves out the CA variables (the TLS scenarios must then FAIL).
# TRY_STRACE=1 records the files each CLI touches in <scenario>/strace.txt.
# Keeps its work dir (printed) for inspection: model.log, stub.log, proxy.log, dns.log, stdout.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
NPM=${GATEHOUSE_TEST_NPM:-/opt/gatehouse-test-npm}
CLAUDE=$NPM/bin/claude
CODEX=${TRY_CODEX:-$NPM/bin/codex}   # TRY_CODEX=<native binary> runs it without node
PY=/usr/bin/python3
TEST_USER=${TEST_USER:-gatehouse-test}
ALL="claude codex claude-tls codex-tls codex-tls-sslcertfile claude-proxy codex-proxy claude-noproxy
 codex-noproxy claude-user codex-user claude-timeout codex-timeout claude-progress codex-progress
 claude-chatty codex-chatty"

if [[ -z ${GH_TRY_NETNS:-} ]]; then
  [[ $(id -u) -eq 0 ]] || { echo "try_agents: run as root (needs unshare -n -m)" >&2; exit 2; }
  exec env GH_TRY_NETNS=1 unshare --net --mount --propagation private bash "$0" "$@"
fi
ip link set lo up

R=$(mktemp -d /tmp/gh-agents-try.XXXXXX); chmod 755 "$R"
echo "try_agents: work dir $R"
PIDS=()
trap 'for p in "${PIDS[@]}" $(cat "$R/pids" 2>/dev/null); do kill "$p" 2>/dev/null; done' EXIT

# ---- fake DNS (logs every query, answers NXDOMAIN) and a CONNECT proxy (trial only)
cat > "$R/dns.py" <<'EOF'
import json, socket, struct, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 53))
while True:
    d, a = s.recvfrom(4096)
    try:
        i, labels = 12, []
        while d[i]:
            labels.append(d[i + 1:i + 1 + d[i]].decode()); i += 1 + d[i]
        with open(sys.argv[1], "a") as f:
            f.write(json.dumps({"time": time.time(), "name": ".".join(labels)}) + "\n")
        s.sendto(d[:2] + struct.pack(">HHHHH", 0x8183, 1, 0, 0, 0) + d[12:i + 5], a)
    except Exception:
        pass
EOF
cat > "$R/proxy.py" <<'EOF'
# HTTP proxy for the trial: logs the request line; CONNECT host:port is tunnelled to
# 127.0.0.1:port whatever the host (so a name that no DNS knows still works through it).
import json, socket, sys, threading, time
log = sys.argv[1]
def pipe(a, b):
    try:
        while (x := a.recv(65536)):
            b.sendall(x)
    except OSError:
        pass
    finally:
        for s in (a, b):
            try: s.shutdown(socket.SHUT_RDWR)
            except OSError: pass
def serve(c):
    head = b""
    while b"\r\n\r\n" not in head and len(head) < 65536:
        x = c.recv(4096)
        if not x: return
        head += x
    line = head.split(b"\r\n")[0].decode("latin-1")
    with open(log, "a") as f:
        f.write(json.dumps({"time": time.time(), "request": line}) + "\n")
    meth, target = line.split(" ")[:2]
    if meth != "CONNECT":
        c.sendall(b"HTTP/1.1 501 only CONNECT\r\nContent-Length: 0\r\n\r\n"); c.close(); return
    port = int(target.rsplit(":", 1)[1])
    up = socket.create_connection(("127.0.0.1", port))
    c.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
    rest = head.split(b"\r\n\r\n", 1)[1]
    if rest: up.sendall(rest)
    threading.Thread(target=pipe, args=(up, c), daemon=True).start()
    pipe(c, up)
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0)); s.listen(16)
print(json.dumps({"port": s.getsockname()[1]}), flush=True)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
EOF
touch "$R/dns.log"; chmod 666 "$R/dns.log"
echo "nameserver 127.0.0.1" > "$R/resolv.conf"; chmod 644 "$R/resolv.conf"
mount --bind "$R/resolv.conf" /etc/resolv.conf
$PY "$R/dns.py" "$R/dns.log" & PIDS+=($!)

# ---- a CA and a server certificate for 127.0.0.1 and model.test
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=gatehouse-test-ca \
  -keyout "$R/ca.key" -out "$R/ca.pem" >/dev/null 2>&1
openssl req -newkey rsa:2048 -nodes -subj /CN=model.test -keyout "$R/srv.key" -out "$R/srv.csr" >/dev/null 2>&1
printf 'subjectAltName=DNS:model.test,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' > "$R/ext.cnf"
openssl x509 -req -in "$R/srv.csr" -CA "$R/ca.pem" -CAkey "$R/ca.key" -CAcreateserial -days 2 \
  -extfile "$R/ext.cnf" -out "$R/srv.pem" >/dev/null 2>&1
chmod 644 "$R"/*.pem "$R"/*.key

start_json() {  # start_json LOGFILE CMD...: runs CMD in the background, echoes its {"port"}
  local out=$1; shift   # (called in $(...): its pid goes to $R/pids for the exit trap)
  "$@" > "$out" 2>"$out.err" & echo $! >> "$R/pids"
  for _ in $(seq 50); do [[ -s $out ]] && break; sleep 0.1; done
  $PY -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["port"])' "$out"
}

PASS=0; FAIL=0
run() {  # run SCENARIO
  local sc=$1 agent=${1%%-*} variant=${1#*-}
  [[ $variant == "$sc" ]] && variant=plain
  local D=$R/$sc; mkdir -p "$D/work" "$D/home" "$D/state" "$D/tmp"; chmod 755 "$D"
  echo "hello from input file 42" > "$D/in.txt"; chmod 644 "$D/in.txt"
  local scheme=http host=127.0.0.1 tls=() ms_env=() envs=() as=() timeout_s=90
  local script='[{"tool": "read_file", "args": {"path": "'$D'/in.txt"}, "expect_result_contains": "hello from input"},
    {"tool": "write_file", "args": {"path": "'$D'/work/out.txt", "content": "written by agent"}},
    {"text": "All done: FINAL-ANSWER-OK"}]'
  case $variant in
    tls*|proxy|noproxy) scheme=https; tls=(--cert "$R/srv.pem" --key "$R/srv.key");;
  esac
  case $variant in
    timeout) script='[{"tool": "sleep", "args": {"seconds": 8}}, {"text": "All done: FINAL-ANSWER-OK"}]';;
    progress) script='[{"tool": "sleep", "args": {"seconds": 8, "progress_every": 1}}, {"text": "All done: FINAL-ANSWER-OK"}]';;
  esac
  echo "$script" > "$D/script.json"; touch "$D/model.log"
  local port; port=$(start_json "$D/port.json" $PY "$HERE/model_server.py" --script "$D/script.json" \
    --log "$D/model.log" "${tls[@]}")
  local pport=""
  if [[ $variant == proxy || $variant == noproxy ]]; then
    pport=$(start_json "$D/pport.json" $PY "$R/proxy.py" "$D/proxy.log")
    envs+=(HTTPS_PROXY=http://127.0.0.1:$pport https_proxy=http://127.0.0.1:$pport)
    if [[ $variant == proxy ]]; then host=model.test  # only the proxy can reach this name
    else envs+=(NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost); fi
  fi
  local url=$scheme://$host:$port
  local stub_env="\"STUB_MCP_LOG\": \"$D/stub.log\", \"TEST_FROM_CONFIG\": \"yes\", \"STUB_MCP_DELAY\": \"${TRY_MCP_DELAY:-0}\""
  local dns0; dns0=$(wc -l < "$R/dns.log")
  if [[ $variant == user ]]; then
    chown -R "$TEST_USER" "$D/work" "$D/state" "$D/tmp"; chown root "$D/home"; chmod 555 "$D/home"
    touch "$D/stub.log" "$D/model.log"; chown "$TEST_USER" "$D/stub.log"
    as=(runuser -u "$TEST_USER" --)
  fi
  if [[ $agent == claude ]]; then
    cat > "$D/mcp.json" <<EOF
{"mcpServers": {"gatehouse": {"type": "stdio", "command": "$HERE/stub_mcp.py", "args": [],
  "env": {$stub_env}}}}
EOF
    envs+=(ANTHROPIC_BASE_URL=$url ANTHROPIC_API_KEY=dummy CLAUDE_CONFIG_DIR=$D/state
      DISABLE_AUTOUPDATER=1)
    [[ $variant != chatty ]] && envs+=(CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1)
    [[ $scheme == https && -z ${TRY_NO_CA:-} ]] && envs+=(NODE_EXTRA_CA_CERTS=$R/ca.pem)
    [[ $variant == timeout || $variant == progress ]] && envs+=(MCP_TOOL_TIMEOUT=3000)
    local cmd=("$CLAUDE" -p "do the task" --mcp-config "$D/mcp.json" --strict-mcp-config
      --allowedTools mcp__gatehouse --tools "" --model test-model --output-format text)
  else
    local tt="" ; [[ $variant == timeout || $variant == progress ]] && tt="tool_timeout_sec = 3"
    local quiet='check_for_update_on_startup = false
web_search = "disabled"'
    # analytics: ab.chatgpt.com; plugins/remote_plugin: github.com, api.github.com, chatgpt.com.
    # The other features only add built-in tools (shell, patch, images, sub-agents, goals, ...).
    local quiet_tables='[analytics]
enabled = false

[feedback]
enabled = false

[agents]
enabled = false

[features]
apps = false
plugins = false
remote_plugin = false
shell_tool = false
unified_exec = false
view_image = false
goals = false
image_generation = false
sleep_tool = false
tool_suggest = false
skill_search = false
browser_use = false
computer_use = false
shell_snapshot = false
unbounded_connection_retries = false'
    [[ $variant == chatty ]] && quiet="" quiet_tables=""
    cat > "$D/state/config.toml" <<EOF
model = "test-model"
model_provider = "mock"
approval_policy = "never"
sandbox_mode = "danger-full-access"
$quiet

[model_providers.mock]
name = "mock"
base_url = "$url/v1"
wire_api = "responses"
env_key = "MOCK_API_KEY"
request_max_retries = 0
stream_max_retries = 0

[mcp_servers.gatehouse]
command = "$HERE/stub_mcp.py"
args = []
env = { ${stub_env//\": \"/\" = \"} }
env_vars = ["TEST_PASSED"]
default_tools_approval_mode = "approve"
startup_timeout_sec = 20
required = true
$tt

$quiet_tables
EOF
    envs+=(CODEX_HOME=$D/state MOCK_API_KEY=dummy)
    if [[ $scheme == https && -z ${TRY_NO_CA:-} ]]; then
      if [[ $variant == tls-sslcertfile ]]; then envs+=(SSL_CERT_FILE=$R/ca.pem)
      else envs+=(CODEX_CA_CERTIFICATE=$R/ca.pem); fi
    fi
    local cmd=("$CODEX" exec --strict-config --skip-git-repo-check)
    cmd+=("do the task")
  fi
  ( cd "$D/work" && "${as[@]}" env -i PATH=/usr/bin:/bin HOME=$D/home TMPDIR=$D/tmp TEST_PASSED=yes TEST_NOT_PASSED=yes \
      "${envs[@]}" timeout $timeout_s ${TRY_STRACE:+strace -f -qq -o "$D/strace.txt" -e trace=%file,execve} "${cmd[@]}" < /dev/null > "$D/stdout" 2> "$D/stderr" )
  local rc=$?
  sleep 0.5
  # ---- verdict and findings
  local ok=1 why=""
  grep -q FINAL-ANSWER-OK "$D/stdout" || { ok=0; why+=" no-final-text(rc=$rc)"; }
  case $variant in
    timeout|progress) ;;
    *) [[ $(cat "$D/work/out.txt" 2>/dev/null) == "written by agent" ]] || { ok=0; why+=" out.txt-missing"; }
       grep -q 'hello from input' "$D/model.log" || { ok=0; why+=" read-result-not-seen"; };;
  esac
  [[ $variant == proxy ]] && { grep -q "CONNECT model.test:$port" "$D/proxy.log" 2>/dev/null || { ok=0; why+=" no-CONNECT"; }; }
  [[ $variant == noproxy && -s $D/proxy.log ]] && { ok=0; why+=" NO_PROXY-ignored"; }
  local facts
  facts=$($PY - "$D" "$R/dns.log" "$dns0" <<'EOF'
import json, os, sys
d, dns, dns0 = sys.argv[1], sys.argv[2], int(sys.argv[3])
def lines(p):
    try: return [json.loads(l) for l in open(p) if l.strip()]
    except FileNotFoundError: return []
m, s = lines(d + "/model.log"), lines(d + "/stub.log")
out = []
out.append("requests=%s" % ",".join(sorted({"%s %s" % (e["method"], e["path"].split("?")[0]) for e in m})))
out.append("model_calls=%d" % sum(1 for e in m if e.get("api")))
tools = next((e["tools"] for e in m if e.get("tools")), [])
out.append("tools=%s" % ",".join(tools))
res = [r["text"][:90] for e in m[-1:] for r in e.get("tool_results", [])]
out.append("last_results=%s" % json.dumps(res))
starts = [e for e in s if e["event"] == "start"]
out.append("mcp_starts=%d" % len(starts))
if starts:
    out.append("mcp_env=%s" % ",".join(starts[0]["env_keys"]))
    out.append("mcp_uid=%s" % starts[0]["uid"])
calls = [e for e in s if e.get("method") == "tools/call"]
out.append("call_meta_keys=%s" % json.dumps([sorted(c.get("meta") or {}) for c in calls]))
out.append("progress_tokens=%s" % json.dumps([(c.get("meta") or {}).get("progressToken") for c in calls]))
out.append("cancelled=%d" % sum(1 for e in s if e.get("method") == "notifications/cancelled"))
ev = [e["event"] for e in s if e["event"] in ("tool_cancelled", "tool_done", "progress_sent")]
out.append("sleep_events=%s" % ",".join(sorted(set(ev))))
names = sorted({e["name"] for e in lines(dns)[dns0:]})
out.append("dns=%s" % ",".join(names))
out.append("proxy=%s" % json.dumps([e["request"] for e in lines(d + "/proxy.log")]))
print(" ".join(out))
EOF
)
  if [[ $ok == 1 ]]; then PASS=$((PASS + 1)); echo "PASS $sc: $facts"
  else FAIL=$((FAIL + 1)); echo "FAIL $sc:$why: $facts"; tail -5 "$D/stderr" | sed 's/^/    stderr: /'; fi
  if [[ $variant == user ]]; then echo "    home after run: $(ls -A "$D/home" | tr '\n' ' ')"; fi
  echo "    state dir: $(ls -A "$D/state" | tr '\n' ' ')"
}

for sc in ${@:-$ALL}; do run "$sc"; done
echo "$PASS passed, $FAIL failed"
