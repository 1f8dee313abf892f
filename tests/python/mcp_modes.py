#!/usr/bin/env python3
"""Session modes through `gatehouse mcp` with the official MCP Python SDK: the agent's side of
each mode, and of a switch made by the human (`gatehouse session mode`, on the ui channel)
while a card waits. Uses mcp_agent.py's connection and CLI helpers.

    mcp_modes.py SCENARIO --gatehouse BIN --data-dir DIR --project DIR [--mode auto|legacy]

The policy file (written by the Rust test) sets the default profile's `mode`; write_file asks,
a rule denies writes to deny-*, and the project is granted read/write.

Scenarios:
  ask          a write waits for a card (the card says mode ask); the approver allows it.
  full-access  a write runs without a card; a Deny rule and a protected path still refuse; the same
               write again is answered from the ledger.
  unattended   a write is refused at once naming the session and the way out; nothing waits.
  switch       (mode ask) a write waits; the human switches the session to full-access and the
               call runs; another write waits; the switch to unattended refuses it.

Each prints one JSON summary line on success; `FAIL: ...` and exit 1 on the first surprise.
"""

import argparse
import asyncio
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcp_agent import MCP_VERSION, Failure, check, cli, connect  # noqa: E402


async def pending(a):
    code, out, err = await cli(a, "approve")
    check(code == 0, f"gatehouse approve: {err}")
    return json.loads(out)


async def wait_for_card(a, target_part):
    for _ in range(2400):
        for p in await pending(a):
            if target_part in p["target"]:
                return p
        await asyncio.sleep(0.05)
    raise Failure(f"no card for {target_part} appeared")


async def sessions(a):
    code, out, err = await cli(a, "session", "list")
    check(code == 0, f"gatehouse session list: {err}")
    return json.loads(out)


async def set_mode(a, sid, mode):
    code, out, err = await cli(a, "session", "mode", sid, mode)
    check(code == 0, f"gatehouse session mode {sid} {mode}: {out} {err}")
    return json.loads(out)


async def deny_and_protected_hold(ag, s):
    err, text = await ag.call("write_file", {"path": "deny-me.txt", "content": "no\n"})
    check(err and "denied by" in text, f"a write a rule denies: {err} {text}")
    check(not os.path.exists(os.path.join(ag_project, "deny-me.txt")), "a denied write happened")
    s["denied"] = text
    os.makedirs(os.path.join(ag_project, ".git"), exist_ok=True)
    err, text = await ag.call("write_file", {"path": ".git/config", "content": "[core]\n"})
    check(err and "protected" in text, f".git/config: {err} {text}")
    s["protected"] = text


async def scenario_ask(a):
    s = {"mcp": MCP_VERSION}
    async with connect(a) as ag:
        call = asyncio.create_task(ag.call("write_file", {"path": "ask-a.txt", "content": "a\n"}))
        card = await wait_for_card(a, "ask-a.txt")
        check(card["mode"] == "ask", f"the card's mode: {card}")
        check(not os.path.exists(os.path.join(a.project, "ask-a.txt")), "written before the card was answered")
        code, out, err = await cli(a, "approve", str(card["id"]), "allow")
        check(code == 0, f"approve: {out} {err}")
        err, text = await call
        check(not err and "Created" in text, f"approved write: {err} {text}")
        listed = [x for x in await sessions(a) if x["session"] == card["session"]]
        check(listed and listed[0]["mode"] == "ask", f"session list: {listed}")
        s["session"] = card["session"]
        await deny_and_protected_hold(ag, s)
    return s


async def scenario_full_access(a):
    s = {"mcp": MCP_VERSION}
    async with connect(a) as ag:
        # No approver runs: a card would leave this call waiting until the test's deadline.
        err, text = await ag.call("write_file", {"path": "fa.txt", "content": "f\n"})
        check(not err and "Created" in text, f"full-access write: {err} {text}")
        check(await pending(a) == [], "a card was made in full-access mode")
        err, again = await ag.call("write_file", {"path": "fa.txt", "content": "f\n"})
        check(not err and "not carried out again" in again, f"the same write again: {err} {again}")
        s["again"] = again
        listed = await sessions(a)
        check(len(listed) == 1 and listed[0]["mode"] == "full-access", f"session list: {listed}")
        s["session"] = listed[0]["session"]
        await deny_and_protected_hold(ag, s)
    return s


async def scenario_unattended(a):
    s = {"mcp": MCP_VERSION}
    async with connect(a) as ag:
        err, text = await ag.call("write_file", {"path": "un.txt", "content": "u\n"})
        listed = await sessions(a)
        check(len(listed) == 1 and listed[0]["mode"] == "unattended", f"session list: {listed}")
        sid = listed[0]["session"]
        check(err and f"session {sid} is unattended" in text and "nobody is there to answer" in text
              and f"gatehouse session mode {sid} ask" in text, f"unattended write: {err} {text}")
        check(not os.path.exists(os.path.join(a.project, "un.txt")), "written in unattended mode")
        check(await pending(a) == [], "a card was made in unattended mode")
        s["refused"] = text
        s["session"] = sid
        await deny_and_protected_hold(ag, s)
        # Reads the policy allows still run.
        err, text = await ag.call("read_file", {"path": "hello.txt"})
        check(not err and text == "hello\n", f"read in unattended mode: {err} {text}")
    return s


async def scenario_switch(a):
    s = {"mcp": MCP_VERSION}
    async with connect(a) as ag:
        call = asyncio.create_task(ag.call("write_file", {"path": "sw-a.txt", "content": "a\n"}))
        card = await wait_for_card(a, "sw-a.txt")
        sid = card["session"]
        r = await set_mode(a, sid, "full-access")
        check(r == {"session": sid, "old": "ask", "new": "full-access", "answered": 1}, f"switch: {r}")
        err, text = await call
        check(not err and "Created" in text, f"the waiting write after the switch to full-access: {err} {text}")
        check(await pending(a) == [], f"the card still waits: {await pending(a)}")
        s["to_full"] = text

        r = await set_mode(a, sid, "ask")
        check(r["old"] == "full-access" and r["answered"] == 0, f"back to ask: {r}")
        call = asyncio.create_task(ag.call("write_file", {"path": "sw-b.txt", "content": "b\n"}))
        card = await wait_for_card(a, "sw-b.txt")
        check(card["mode"] == "ask", f"card: {card}")
        r = await set_mode(a, sid, "unattended")
        check(r["answered"] == 1, f"switch to unattended: {r}")
        err, text = await call
        check(err and f"session {sid} is unattended" in text, f"the waiting write after the switch to unattended: {err} {text}")
        check(not os.path.exists(os.path.join(a.project, "sw-b.txt")), "refused write happened")
        # A decision on the answered card is refused: it is closed.
        code, out, err_text = await cli(a, "approve", str(card["id"]), "allow")
        check(code != 0 and "already been decided" in err_text, f"late decision: {code} {out} {err_text}")
        s["to_unattended"] = text
        s["session"] = sid

        # Back to ask: the same refused call asked again gets a new card (nothing was decided).
        r = await set_mode(a, sid, "ask")
        call = asyncio.create_task(ag.call("write_file", {"path": "sw-b.txt", "content": "b\n"}))
        card2 = await wait_for_card(a, "sw-b.txt")
        check(card2["id"] != card["id"], f"a new card: {card2}")
        code, out, err_text = await cli(a, "approve", str(card2["id"]), "allow")
        check(code == 0, f"approve: {out} {err_text}")
        err, text = await call
        check(not err and "Created" in text, f"asked again after unattended: {err} {text}")
    return s


def main():
    global ag_project
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario", choices=["ask", "full-access", "unattended", "switch"])
    ap.add_argument("--gatehouse", required=True)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--project", required=True)
    ap.add_argument("--mode", default="legacy")
    ap.add_argument("--approval-wait", type=int, default=300)
    a = ap.parse_args()
    ag_project = a.project
    run = {"ask": scenario_ask, "full-access": scenario_full_access,
           "unattended": scenario_unattended, "switch": scenario_switch}[a.scenario]
    try:
        summary = asyncio.run(asyncio.wait_for(run(a), timeout=240))
    except Failure as e:
        print(f"FAIL: {e}", file=sys.stderr)
        sys.exit(1)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
