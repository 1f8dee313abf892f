#!/usr/bin/env python3
"""Scripted model endpoint for driving real agent CLIs (Claude Code, Codex) in tests.

Speaks the Anthropic Messages API (POST /v1/messages, streaming SSE or JSON) and the
OpenAI Responses API (POST /v1/responses, streaming SSE or JSON). Which step of the script
comes next is derived from the conversation in each request: the number of tool results it
already holds. So retries and side requests (title generation, quota checks: requests that
offer no tools) never advance the script.

Script (--script FILE, JSON list):
  [{"tool": "read_file", "args": {"path": "/x"}, "expect_result_contains": "hello"},
   {"text": "final answer"}]
"tool" is resolved against the tool names offered in the request: exact, then a name ending
in "__<tool>", then any name containing it. "expect_result_contains" is only logged.
A step with "wait_for": PATH is answered only once PATH exists (at most 120 s).
Codex's namespaced MCP tools ({"type": "namespace", "name": "mcp__srv", "tools": [...]}) are
offered as "mcp__srv__tool" and called back with {"namespace": "mcp__srv", "name": "tool"}.
--dump DIR writes every request body to DIR/<n>.json (to see what a CLI really sends).

Every request is appended as one JSON line to --log FILE. Python stdlib only.
Usage: model_server.py --script S.json [--port 0] [--log L.jsonl] [--cert C --key K]
Prints {"port": N} as its first stdout line.
"""
import argparse
import gzip
import json
import os
import ssl
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "test-model"
TRUNC = 4000
SIDE_TEXT = "ok"

ARGS = None
SCRIPT = []
LOG_LOCK = threading.Lock()
NAMESPACED = {}  # "mcp__srv__tool" -> ("mcp__srv", "tool"), from Responses namespace tools


def log(entry):
    if not ARGS.log:
        return
    entry["time"] = round(time.time(), 3)
    with LOG_LOCK, open(ARGS.log, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry, ensure_ascii=False) + "\n")


def trunc(s):
    s = s if isinstance(s, str) else json.dumps(s, ensure_ascii=False)
    return s if len(s) <= TRUNC else s[:TRUNC] + "...[truncated]"


def content_text(c):
    """Flatten a tool-result content (string, list of blocks, or other) to text."""
    if c is None:
        return ""
    if isinstance(c, str):
        return c
    if isinstance(c, list):
        return "\n".join(content_text(x) for x in c)
    if isinstance(c, dict):
        for k in ("text", "output", "content"):
            if k in c:
                return content_text(c[k])
    return json.dumps(c, ensure_ascii=False)


def resolve_tool(want, offered):
    for pred in (lambda n: n == want,
                 lambda n: n.endswith("__" + want),
                 lambda n: want in n):
        for name in offered:
            if pred(name):
                return name
    return None


def decide(offered, n_results):
    """Return ("text", str) or ("tool", name, args, step_index)."""
    if not offered:
        return ("text", SIDE_TEXT, None)
    if n_results >= len(SCRIPT):
        return ("text", "script finished", n_results)
    step = SCRIPT[n_results]
    # A step may wait for a file the test creates (e.g. once the human has decided).
    deadline = time.time() + 120
    while "wait_for" in step and not os.path.exists(step["wait_for"]) and time.time() < deadline:
        time.sleep(0.05)
    if "text" in step:
        return ("text", step["text"], n_results)
    name = resolve_tool(step["tool"], offered)
    if name is None:
        return ("text", "ERROR: no offered tool matches %r (offered: %s)"
                % (step["tool"], ", ".join(offered)), n_results)
    return ("tool", name, step.get("args", {}), n_results)


def sse(events):
    out = []
    for ev in events:
        out.append("event: %s\ndata: %s\n\n" % (ev["type"], json.dumps(ev)))
    return "".join(out).encode()


# ---------------------------------------------------------------- Anthropic Messages

def anthropic_parse(body):
    offered = [t.get("name", "") for t in body.get("tools") or [] if isinstance(t, dict)]
    results = []
    for m in body.get("messages") or []:
        if isinstance(m.get("content"), list):
            for b in m["content"]:
                if isinstance(b, dict) and b.get("type") == "tool_result":
                    results.append({"id": b.get("tool_use_id"), "is_error": b.get("is_error", False),
                                    "text": trunc(content_text(b.get("content")))})
    return offered, results


def anthropic_reply(body, decision, rid):
    if decision[0] == "tool":
        _, name, args, idx = decision
        block = {"type": "tool_use", "id": "toolu_%s_%d" % (rid, idx), "name": name, "input": args}
        stop = "tool_use"
    else:
        block = {"type": "text", "text": decision[1]}
        stop = "end_turn"
    usage = {"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 0,
             "cache_read_input_tokens": 0}
    msg = {"id": "msg_" + rid, "type": "message", "role": "assistant",
           "model": body.get("model", MODEL), "content": [block], "stop_reason": stop,
           "stop_sequence": None, "usage": usage}
    if not body.get("stream"):
        return "application/json", json.dumps(msg).encode()
    start = dict(msg, content=[], stop_reason=None, usage=dict(usage, output_tokens=1))
    evs = [{"type": "message_start", "message": start}]
    if block["type"] == "text":
        evs.append({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
        evs.append({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": block["text"]}})
    else:
        evs.append({"type": "content_block_start", "index": 0,
                    "content_block": dict(block, input={})})
        evs.append({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}})
    evs.append({"type": "content_block_stop", "index": 0})
    evs.append({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 5}})
    evs.append({"type": "message_stop"})
    return "text/event-stream", sse(evs)


# ---------------------------------------------------------------- OpenAI Responses

def responses_parse(body):
    """Tool names offered; Codex groups MCP tools as {"type": "namespace", "name": "mcp__srv",
    "tools": [...]}: those are listed as "mcp__srv__tool" and remembered in NAMESPACED."""
    offered = []
    for t in body.get("tools") or []:
        if not isinstance(t, dict):
            continue
        if isinstance(t.get("tools"), list):
            ns = t.get("name", "")
            for x in t["tools"]:
                if isinstance(x, dict):
                    full = ns + ("" if ns.endswith("_") else "__") + x.get("name", "")
                    NAMESPACED[full] = (ns, x.get("name", ""))
                    offered.append(full)
        else:
            offered.append(t.get("name") or (t.get("function") or {}).get("name") or t.get("type", ""))
    results = []
    items = body.get("input")
    for it in items if isinstance(items, list) else []:
        if isinstance(it, dict) and str(it.get("type", "")).endswith("call_output"):
            results.append({"id": it.get("call_id"), "type": it.get("type"),
                            "text": trunc(content_text(it.get("output")))})
    return offered, results


def responses_reply(body, decision, rid):
    if decision[0] == "tool":
        _, name, args, idx = decision
        item = {"type": "function_call", "id": "fc_%s_%d" % (rid, idx), "status": "completed",
                "call_id": "call_%s_%d" % (rid, idx), "name": name, "arguments": json.dumps(args)}
        if name in NAMESPACED:  # answer a namespaced tool as {"namespace": ns, "name": tool}
            item.update(namespace=NAMESPACED[name][0], name=NAMESPACED[name][1])
    else:
        item = {"type": "message", "id": "msg_" + rid, "status": "completed", "role": "assistant",
                "content": [{"type": "output_text", "text": decision[1], "annotations": []}]}
    usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 5,
             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15}
    resp = {"id": "resp_" + rid, "object": "response", "created_at": int(time.time()),
            "status": "completed", "model": body.get("model", MODEL), "output": [item], "usage": usage}
    if not body.get("stream"):
        return "application/json", json.dumps(resp).encode()
    seq = iter(range(1000))
    evs = [{"type": "response.created", "response": dict(resp, status="in_progress", output=[], usage=None)}]
    if item["type"] == "message":
        text = decision[1]
        evs.append({"type": "response.output_item.added", "output_index": 0,
                    "item": dict(item, status="in_progress", content=[])})
        evs.append({"type": "response.content_part.added", "item_id": item["id"], "output_index": 0,
                    "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}})
        evs.append({"type": "response.output_text.delta", "item_id": item["id"], "output_index": 0,
                    "content_index": 0, "delta": text})
        evs.append({"type": "response.output_text.done", "item_id": item["id"], "output_index": 0,
                    "content_index": 0, "text": text})
    else:
        evs.append({"type": "response.output_item.added", "output_index": 0,
                    "item": dict(item, status="in_progress", arguments="")})
        evs.append({"type": "response.function_call_arguments.delta", "item_id": item["id"],
                    "output_index": 0, "delta": item["arguments"]})
        evs.append({"type": "response.function_call_arguments.done", "item_id": item["id"],
                    "output_index": 0, "arguments": item["arguments"]})
    evs.append({"type": "response.output_item.done", "output_index": 0, "item": item})
    evs.append({"type": "response.completed", "response": resp})
    for ev in evs:
        ev["sequence_number"] = next(seq)
    return "text/event-stream", sse(evs)


# ---------------------------------------------------------------- HTTP

class Server(ThreadingHTTPServer):
    daemon_threads = True
    tls = None

    def finish_request(self, request, client_address):  # TLS handshake in the worker thread
        if self.tls:
            request = self.tls.wrap_socket(request, server_side=True)
        super().finish_request(request, client_address)

    def handle_error(self, request, client_address):
        print("model_server: error from %s: %r" % (client_address, sys.exc_info()[1]),
              file=sys.stderr, flush=True)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    counter = iter(range(1, 10 ** 9))

    def log_message(self, fmt, *a):  # keep stderr quiet
        pass

    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        enc = (self.headers.get("Content-Encoding") or "").lower()
        if enc == "gzip":
            raw = gzip.decompress(raw)
        elif enc == "deflate":
            raw = zlib.decompress(raw)
        elif enc:
            raise ValueError("unsupported Content-Encoding " + enc)
        return raw

    def send(self, code, ctype, data):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("request-id", "req_test")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def handle_any(self):
        rid = "%06d" % next(Handler.counter)
        path = self.path.split("?")[0]
        entry = {"method": self.command, "path": self.path, "host": self.headers.get("Host"),
                 "user_agent": self.headers.get("User-Agent")}
        try:
            raw = self.read_body()
            if ARGS.dump:
                with open("%s/%s.json" % (ARGS.dump, rid), "wb") as f:
                    f.write(raw)
            body = json.loads(raw) if raw.strip() else {}
            if self.command == "POST" and path.endswith("/messages") and "messages" in body:
                offered, results = anthropic_parse(body)
                api, reply = "anthropic", anthropic_reply
            elif self.command == "POST" and path.endswith("/responses"):
                offered, results = responses_parse(body)
                api, reply = "responses", responses_reply
            else:
                api = None
            if api:
                nxt = SCRIPT[len(results)] if offered and len(results) < len(SCRIPT) else {}
                if "wait_for" in nxt:
                    # Said before the wait, so a test can see what the agent sent so far.
                    log(dict(entry, api=api, tool_results=results, waiting_for=nxt["wait_for"]))
                d = decide(offered, len(results))
                entry.update(api=api, model=body.get("model"), stream=bool(body.get("stream")),
                             tools=offered, tool_results=results, step=d[-1],
                             reply=(d[1] if d[0] == "tool" else "text:" + trunc(d[1])))
                if d[0] == "tool" and d[-1] is not None:
                    step = SCRIPT[d[-1]]
                    if "expect_result_contains" in step:
                        entry["expect_result_contains"] = step["expect_result_contains"]
                ctype, data = reply(body, d, rid)
                self.send(200, ctype, data)
            elif path.endswith("/count_tokens"):
                self.send(200, "application/json", b'{"input_tokens": 10}')
            elif path.rstrip("/").endswith("/models"):
                m = {"id": MODEL, "object": "model", "type": "model", "display_name": MODEL,
                     "created": 0, "created_at": "2025-01-01T00:00:00Z", "owned_by": "test"}
                self.send(200, "application/json", json.dumps(
                    {"object": "list", "data": [m], "has_more": False, "first_id": MODEL,
                     "last_id": MODEL}).encode())
            else:
                entry["body"] = trunc(raw.decode("utf-8", "replace"))
                self.send(200, "application/json", b"{}")
        except Exception as e:  # never crash: answer 500 and log
            entry["error"] = repr(e)
            try:
                self.send(500, "application/json", json.dumps(
                    {"type": "error", "error": {"type": "api_error", "message": repr(e)}}).encode())
            except Exception:
                pass
        log(entry)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = handle_any


def main():
    global ARGS, SCRIPT
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--script", required=True)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--log")
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("--dump", metavar="DIR", help="write every request body to DIR/<n>.json")
    ARGS = p.parse_args()
    with open(ARGS.script, encoding="utf-8") as f:
        SCRIPT = json.load(f)
    srv = Server((ARGS.host, ARGS.port), Handler)
    if ARGS.cert:
        srv.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        srv.tls.load_cert_chain(ARGS.cert, ARGS.key)
    print(json.dumps({"port": srv.server_address[1]}), flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
