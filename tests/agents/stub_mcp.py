#!/opt/gatehouse-test-venv/bin/python
"""Stub MCP stdio server for trying agent CLIs without gatehouse (mcp 1.x SDK).

Tools: read_file(path), write_file(path, content), sleep(seconds, progress_every).
Logs to $STUB_MCP_LOG (or --log FILE), one JSON line per event: its start (pid, uid, argv,
environment), every JSON-RPC message it receives (method, id, params._meta), tool calls,
progress sent and cancellations. $STUB_MCP_DELAY=<seconds> delays its start (slow server).
"""
import asyncio
import io
import json
import os
import sys
import threading
import time

from mcp.server.fastmcp import Context, FastMCP

LOG = os.environ.get("STUB_MCP_LOG")
if "--log" in sys.argv:
    LOG = sys.argv[sys.argv.index("--log") + 1]


def log(**e):
    if LOG:
        e.update(time=round(time.time(), 3), pid=os.getpid())
        with open(LOG, "a", encoding="utf-8") as f:
            f.write(json.dumps(e) + "\n")


def tap_stdin():
    """Relay fd 0 through a pipe, logging each incoming JSON-RPC message."""
    r, w = os.pipe()

    def pump():
        with os.fdopen(0, "rb", buffering=0) as src, os.fdopen(w, "wb", buffering=0) as dst:
            buf = b""
            while True:
                chunk = src.read(65536)
                if not chunk:
                    log(event="stdin_eof")
                    return
                dst.write(chunk)
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    try:
                        m = json.loads(line)
                        p = m.get("params") or {}
                        log(event="recv", method=m.get("method"), id=m.get("id"),
                            meta=p.get("_meta") if isinstance(p, dict) else None,
                            params=json.dumps(p)[:600])
                    except Exception:
                        log(event="recv_raw", line=line[:300].decode("utf-8", "replace"))

    threading.Thread(target=pump, daemon=True).start()
    sys.stdin = io.TextIOWrapper(os.fdopen(r, "rb"), encoding="utf-8")


mcp = FastMCP("stub")


@mcp.tool()
def read_file(path: str) -> str:
    """Read a text file and return its content."""
    log(event="tool", name="read_file", path=path)
    with open(path, encoding="utf-8") as f:
        return f.read()


@mcp.tool()
def write_file(path: str, content: str) -> str:
    """Write content to a text file (created or replaced)."""
    log(event="tool", name="write_file", path=path, size=len(content))
    with open(path, "w", encoding="utf-8") as f:
        f.write(content)
    return "wrote %d bytes to %s" % (len(content), path)


@mcp.tool()
async def sleep(seconds: float, progress_every: float = 0, ctx: Context = None) -> str:
    """Sleep, optionally sending notifications/progress every progress_every seconds."""
    token = ctx.request_context.meta.progressToken if ctx and ctx.request_context.meta else None
    log(event="tool", name="sleep", seconds=seconds, progress_token=token)
    start = time.time()
    try:
        while time.time() - start < seconds:
            step = progress_every if progress_every > 0 else seconds
            await asyncio.sleep(min(step, seconds - (time.time() - start)))
            if progress_every > 0 and token is not None:
                await ctx.report_progress(time.time() - start, seconds)
                log(event="progress_sent", elapsed=round(time.time() - start, 1))
    except asyncio.CancelledError:
        log(event="tool_cancelled", name="sleep", after=round(time.time() - start, 1))
        raise
    log(event="tool_done", name="sleep")
    return "slept %s s" % seconds


if __name__ == "__main__":
    log(event="start", uid=os.getuid(), argv=sys.argv, cwd=os.getcwd(), env_keys=sorted(os.environ),
        env_test={k: v for k, v in os.environ.items() if k.startswith(("GH_", "STUB_", "TEST_"))})
    time.sleep(float(os.environ.get("STUB_MCP_DELAY", "0")))  # a slow-starting server
    tap_stdin()
    mcp.run("stdio")
