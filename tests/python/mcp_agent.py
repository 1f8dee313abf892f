#!/usr/bin/env python3
"""A real agent for `gatehouse mcp`: the official MCP Python SDK (the 1.x or the 2.x line,
whichever this interpreter has) drives the gateway over stdio, and `gatehouse approve` plays
the human on the ui channel.

Each scenario checks what it sees and exits 1 with `FAIL: ...` on the first surprise; on success
it prints one JSON line (a summary the Rust test asserts on further).

    mcp_agent.py SCENARIO --gatehouse BIN --data-dir DIR --project DIR [--mode auto|legacy|2026-07-28]

Scenarios:
  agent    list the tools; call every tool on the scratch project; approvals allowed and one
           denied by the approver; invalid arguments, unknown tools and methods, a 5 MiB message.
  timeout  an Ask nobody answers in time: progress while waiting, then the tool error naming the
           proposal; after the human allows it, the same call again returns the decision.
  deny     the policy denies some tools outright: they are not listed, and calling one is
           refused as an unknown tool (`--expect-tools` names what must be listed).
  servers  third-party servers of the policy (memory from npm, time from PyPI) through gatehouse.
"""

import argparse
import asyncio
import contextlib
import importlib.metadata
import json
import os
import re
import sys

from mcp import StdioServerParameters

MCP_VERSION = importlib.metadata.version("mcp")
MCP_MAJOR = int(MCP_VERSION.split(".")[0])

ALL_TOOLS = [
    "read_file", "list_dir", "search_files", "grep", "write_file", "edit_file", "delete_path",
    "move_path", "undo_change", "fetch_url", "http_request", "run_command",
]


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def error_code(exc):
    """The JSON-RPC error code of an SDK exception (1.x McpError, 2.x MCPError), else None."""
    err = getattr(exc, "error", None)
    code = getattr(err, "code", None)
    return code if code is not None else getattr(exc, "code", None)


class Agent:
    """One connected session, the same calls on either SDK line."""

    def __init__(self, session, protocol_version):
        self.session = session
        self.protocol_version = protocol_version

    async def tools(self):
        r = await self.session.list_tools()
        return [t.model_dump(by_alias=True, exclude_none=True) for t in r.tools]

    async def call(self, name, arguments, progress=None):
        """(is_error, text) of a tool call; SDK exceptions propagate."""
        kwargs = {}
        if progress is not None:
            kwargs["progress_callback"] = progress
        r = await self.session.call_tool(name, arguments, **kwargs)
        d = r.model_dump(by_alias=True)
        text = "\n".join(c.get("text", "") for c in d.get("content", []))
        return bool(d.get("isError")), text

    async def expect_error(self, coro, code, what):
        try:
            await coro
        except Exception as e:  # noqa: BLE001 - the SDK's error type differs between lines
            check(error_code(e) == code, f"{what}: expected JSON-RPC error {code}, got {e!r}")
            return str(e)
        raise Failure(f"{what}: expected JSON-RPC error {code}, got a result")


@contextlib.asynccontextmanager
async def connect(a):
    params = StdioServerParameters(
        command=a.gatehouse,
        args=["--data-dir", a.data_dir, "mcp", "--approval-wait", str(a.approval_wait)],
        cwd=a.project,
    )
    if MCP_MAJOR >= 2:
        from mcp import Client

        async with Client(params, mode=a.mode, raise_exceptions=True) as c:
            yield Agent(c, c.protocol_version)
    else:
        from mcp import ClientSession
        from mcp.client.stdio import stdio_client

        check(a.mode == "legacy", f"mcp {MCP_VERSION} has only the initialize handshake")
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as s:
                init = await s.initialize()
                yield Agent(s, init.protocolVersion)


async def cli(a, *args):
    """`gatehouse --data-dir D --json ARGS`: (exit status, stdout)."""
    p = await asyncio.create_subprocess_exec(
        a.gatehouse, "--data-dir", a.data_dir, "--json", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await p.communicate()
    return p.returncode, out.decode(), err.decode()


class Approver:
    """The human, on the ui channel through `gatehouse approve`: `rule(proposal)` returns a
    choice (`allow`, `deny`, ...) or None to leave the proposal waiting."""

    def __init__(self, a, rule):
        self.a, self.rule, self.decided = a, rule, {}

    async def run(self):
        while True:
            code, out, err = await cli(self.a, "approve")
            check(code == 0, f"gatehouse approve failed: {err}")
            for p in json.loads(out):
                if p["id"] in self.decided:
                    continue
                choice = self.rule(p)
                if choice is None:
                    continue
                code, out, err = await cli(self.a, "approve", str(p["id"]), choice)
                check(code == 0, f"deciding proposal {p['id']}: {out} {err}")
                self.decided[p["id"]] = (p["target"], choice)
            await asyncio.sleep(0.05)


def by_target(p):
    t = p["target"]
    if "deny-" in t:
        return "deny"
    if "wait-" in t:
        return None
    return "allow"


async def scenario_agent(a):
    s = {"mcp": MCP_VERSION}
    approver = Approver(a, by_target)
    task = asyncio.create_task(approver.run())
    try:
        async with connect(a) as ag:
            s["protocol"] = ag.protocol_version
            tools = await ag.tools()
            names = [t["name"] for t in tools]
            check(names == ALL_TOOLS, f"tools listed: {names}")
            for t in tools:
                check(t["inputSchema"]["type"] == "object", f"{t['name']} schema")
                check(t["description"], f"{t['name']} has a description")
            ann = {t["name"]: t.get("annotations") for t in tools}
            if ag.protocol_version >= "2025-03-26":
                check(ann["read_file"]["readOnlyHint"] is True, "read_file is read-only")
                check(ann["delete_path"]["destructiveHint"] is True, "delete_path is destructive")
                check(ann["fetch_url"]["openWorldHint"] is True, "fetch_url is open-world")
            s["tools"] = names

            # Reads, allowed by the default profile inside the grant.
            err, text = await ag.call("read_file", {"path": "hello.txt"})
            check(not err and text == "hello\n", f"read_file: {err} {text!r}")
            err, text = await ag.call("list_dir", {"path": "."})
            check(not err and "hello.txt" in text, f"list_dir: {text}")
            err, text = await ag.call("search_files", {"path": a.project, "glob": "*.txt"})
            check(not err and os.path.join(a.project, "hello.txt") in text, f"search_files: {text}")
            err, text = await ag.call("grep", {"path": ".", "regex": "hel+o"})
            check(not err and f"{os.path.join(a.project, 'hello.txt')}:1: hello" in text, f"grep: {text}")

            # Changes ask; the approver allows these (progress arrives while the call waits).
            progress = []

            async def on_progress(p, total, message):
                progress.append(message)

            err, text = await ag.call(
                "write_file", {"path": "allow-new.txt", "content": "one\n"}, progress=on_progress)
            check(not err and "Created" in text and "approved" in text, f"write_file: {text}")
            check(progress and "proposal #" in progress[0], f"progress while waiting: {progress}")
            s["progress"] = progress[0]
            err, text = await ag.call(
                "edit_file", {"path": "allow-new.txt", "old_text": "one", "new_text": "two"})
            check(not err and "Edited" in text, f"edit_file: {text}")
            err, text = await ag.call("move_path", {"from": "allow-new.txt", "to": "allow-moved.txt"})
            check(not err and "Moved" in text, f"move_path: {text}")
            m = re.search(r'Checkpoint "([^"]+)"', text)
            check(m, f"move_path names its checkpoint: {text}")
            err, text = await ag.call("undo_change", {"checkpoint": m.group(1)})
            s["undo_change"] = [err, text]
            check(not err and "Restored" in text, f"undo_change: {text}")
            err, text = await ag.call("delete_path", {"path": "allow-new.txt"})
            check(not err and "Deleted" in text, f"delete_path: {text}")

            # A change the human denies: a tool error with the reason.
            err, text = await ag.call("write_file", {"path": "deny-me.txt", "content": "no"})
            check(err and "The human refused this call" in text, f"denied write_file: {err} {text}")
            check(not os.path.exists(os.path.join(a.project, "deny-me.txt")), "denied file exists")

            # Tools whose helper may or may not be wired in yet: a proper result either way;
            # a loopback fetch is never carried out.
            err, text = await ag.call("fetch_url", {"url": "http://127.0.0.1:9/"})
            check(err and text, f"fetch_url of loopback: {err} {text}")
            s["fetch_url"] = text
            err, text = await ag.call("http_request", {"method": "GET", "url": "http://127.0.0.1:9/"})
            check(err and text, f"http_request to loopback: {err} {text}")
            s["http_request"] = text
            err, text = await ag.call("run_command", {"argv": ["true"]})
            check(text, f"run_command: {text!r}")
            s["run_command"] = [err, text]

            # Invalid arguments: tool errors that say what is wrong.
            for args, expect in [
                ({"path": 5}, "`path` must be a string, not a number"),
                ({"path": "a\u0000b"}, "`path` contains a NUL byte"),
                ({"path": "x" * 5000}, "the limit is 4096"),
                ({"path": "hello.txt", "offset": "1"}, "`offset` must be a whole number"),
                ({"path": "hello.txt", "sudo": True}, "unknown argument `sudo`"),
            ]:
                err, text = await ag.call("read_file", args)
                check(err and text.startswith("invalid arguments for read_file: ") and expect in text,
                      f"read_file {str(args)[:60]}: {text}")

            # Unknown and forged tool names, and methods this server does not have.
            for name in ["no_such_tool", "READ_FILE", "read_file ", "read_file\u0000", "../read_file"]:
                msg = await ag.expect_error(ag.call(name, {}), -32602, f"tool {name!r}")
                check("Unknown tool" in msg, f"tool {name!r}: {msg}")
            await ag.expect_error(ag.session.list_prompts(), -32601, "prompts/list")

            # A message over 4 MiB: refused with -32600 on this request, and the session goes on.
            big = "x" * (5 << 20)
            msg = await ag.expect_error(
                ag.call("write_file", {"path": "allow-big.txt", "content": big}), -32600, "5 MiB line")
            check("the limit is 4194304 bytes" in msg, f"5 MiB line: {msg}")
            err, text = await ag.call("read_file", {"path": "hello.txt"})
            check(not err and text == "hello\n", "the session goes on after the 5 MiB line")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if task.done() and not task.cancelled() and task.exception():
            raise task.exception()
    s["decided"] = sorted(c for _, c in approver.decided.values())
    return s


async def scenario_timeout(a):
    s = {"mcp": MCP_VERSION}
    async with connect(a) as ag:
        s["protocol"] = ag.protocol_version
        progress = []

        async def on_progress(p, total, message):
            progress.append(message)

        args = {"path": "wait-a.txt", "content": "late\n"}
        err, text = await ag.call("write_file", args, progress=on_progress)
        m = re.search(r"proposal #(\d+) was not decided within (\d+) s", text)
        check(err and m, f"timed-out call: {err} {text}")
        check(int(m.group(2)) == a.approval_wait, text)
        check("Calling again with exactly the same arguments returns the human's decision" in text, text)
        check(progress and f"proposal #{m.group(1)}" in progress[0], f"progress: {progress}")
        check(not os.path.exists(os.path.join(a.project, "wait-a.txt")), "nothing happens before the decision")
        s["timeout"] = text

        code, out, err_text = await cli(a, "approve", m.group(1), "allow")
        check(code == 0, f"approve: {out} {err_text}")
        # The decided call is carried out by the broker; the same call again returns it.
        for _ in range(200):
            err, text = await ag.call("write_file", args)
            if "still running" in text or "waiting for the human" in text:
                await asyncio.sleep(0.05)
                continue
            break
        check(not err and "Created" in text and "not carried out again" in text, f"repeat: {err} {text}")
        s["repeat"] = text
    with open(os.path.join(a.project, "wait-a.txt")) as f:
        check(f.read() == "late\n", "the approved write happened once")
    return s


async def scenario_deny(a):
    s = {"mcp": MCP_VERSION}
    expect = a.expect_tools.split(",")
    async with connect(a) as ag:
        names = [t["name"] for t in await ag.tools()]
        check(names == expect, f"listed {names}, expected {expect}")
        for name in ALL_TOOLS:
            if name in expect:
                continue
            msg = await ag.expect_error(ag.call(name, {"path": "hello.txt"}), -32602, f"denied tool {name}")
            check(f"Unknown tool: {name}" in msg, msg)
        s["tools"] = names
    return s


def unwrapped(text):
    """The body of gatehouse's outside-text wrapper (it must be there)."""
    m = re.search(r'<external-([0-9a-f]{32}) source="([^"]*)">\n(.*)\n</external-\1>', text, re.S)
    check(m, f"not wrapped as outside text: {text!r}")
    return m.group(2), m.group(3)


async def scenario_servers(a):
    """Third-party servers behind gatehouse (the memory server from npm, the time server from
    PyPI): their tools listed as NAME__TOOL, an allowed call, an asked one the approver allows,
    a denied tool hidden; every result is outside text."""
    s = {"mcp": MCP_VERSION}
    approver = Approver(a, lambda p: "allow" if p["tool"] == "memory__create_entities" else None)
    task = asyncio.create_task(approver.run())
    try:
        async with connect(a) as ag:
            names = [t["name"] for t in await ag.tools()]
            for want in ["memory__create_entities", "memory__read_graph", "time__get_current_time"]:
                check(want in names, f"{want} not listed: {names}")
            check("memory__delete_entities" not in names, f"a denied tool is listed: {names}")
            err, text = await ag.call("time__get_current_time", {"timezone": "UTC"})
            src, body = unwrapped(text)
            check(not err and src == "mcp:time__get_current_time" and '"timezone": "UTC"' in body, f"time: {text}")
            err, text = await ag.call("memory__create_entities", {"entities": [
                {"name": "gatehouse-test-entity", "entityType": "test", "observations": ["made through gatehouse"]}]})
            check(not err, f"create_entities: {text}")
            err, text = await ag.call("memory__read_graph", {})
            src, body = unwrapped(text)
            check(not err and "gatehouse-test-entity" in body, f"read_graph: {text}")
            msg = await ag.expect_error(ag.call("memory__delete_entities", {"entityNames": ["x"]}), -32602, "denied tool")
            check("Unknown tool: memory__delete_entities" in msg, msg)
            s["tools"] = sorted(n for n in names if "__" in n)
            s["decided"] = [c for _, c in approver.decided.values()]
    finally:
        task.cancel()
    return s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario", choices=["agent", "timeout", "deny", "servers"])
    ap.add_argument("--gatehouse", required=True)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--project", required=True)
    ap.add_argument("--mode", default="legacy")
    ap.add_argument("--approval-wait", type=int, default=120)
    ap.add_argument("--expect-tools", default=",".join(ALL_TOOLS))
    a = ap.parse_args()
    run = {"agent": scenario_agent, "timeout": scenario_timeout, "deny": scenario_deny,
           "servers": scenario_servers}[a.scenario]
    try:
        summary = asyncio.run(asyncio.wait_for(run(a), timeout=240))
    except Failure as e:
        print(f"FAIL: {e}", file=sys.stderr)
        sys.exit(1)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
