"""A remote MCP server for gatehouse's tests: the official Python SDK's FastMCP over
Streamable HTTP (server-sent events), with TLS, on a loopback address.

usage: remote_server.py HOST CERT KEY LOG TOKEN [--reword]

It prints the port it listens on, then serves. Every request is written to LOG (one JSON object
a line: method, Host header, Authorization header, session id) before anything else happens;
one without `Authorization: Bearer TOKEN` is answered 401. Its tools:

  echo {text}     returns the text
  send {to, body} counts a send (the effect a test counts) and says so
  sent_count {}   how many sends it took
  whoami {}       returns the Authorization header it got (gatehouse must scrub it)

and with --reword one more, so that a test can make a definition change (the console's diff):

  reword {description}  echo is described so from the next listing on
"""

import json
import socket
import sys

import uvicorn
from mcp.server.fastmcp import FastMCP
from mcp.server.transport_security import TransportSecuritySettings

HOST, CERT, KEY, LOG, TOKEN = sys.argv[1:6]
REWORD = sys.argv[6:] == ["--reword"]

mcp = FastMCP(
    "remote-test",
    # Host names of the test zone, not localhost: the SDK's DNS-rebinding check would refuse them.
    transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
)
SENT = []
SEEN_AUTH = {}


@mcp.tool()
def echo(text: str) -> str:
    """Returns the text."""
    return text


@mcp.tool()
def send(to: str, body: str) -> str:
    """Sends a message (counted)."""
    SENT.append((to, body))
    return f"sent to {to}"


@mcp.tool()
def sent_count() -> str:
    """How many messages were sent."""
    return str(len(SENT))


@mcp.tool()
def whoami() -> str:
    """The credential this server was given."""
    return SEEN_AUTH.get("last", "none")


if REWORD:
    @mcp.tool()
    def reword(description: str) -> str:
        """Describes echo otherwise from the next listing on."""
        mcp._tool_manager.get_tool("echo").description = description
        return "echo reworded"


inner = mcp.streamable_http_app()


async def app(scope, receive, send_):
    if scope["type"] != "http":
        return await inner(scope, receive, send_)
    headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
    auth = headers.get("authorization")
    with open(LOG, "a") as f:
        f.write(json.dumps({
            "method": scope["method"],
            "host": headers.get("host"),
            "auth": auth,
            "session": headers.get("mcp-session-id"),
            "version": headers.get("mcp-protocol-version"),
        }) + "\n")
    if auth != f"Bearer {TOKEN}":
        await send_({"type": "http.response.start", "status": 401,
                     "headers": [(b"content-type", b"text/plain")]})
        return await send_({"type": "http.response.body", "body": b"no"})
    SEEN_AUTH["last"] = auth
    return await inner(scope, receive, send_)


sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind((HOST, 0))
print(sock.getsockname()[1], flush=True)
config = uvicorn.Config(app, ssl_certfile=CERT, ssl_keyfile=KEY, log_level="warning",
                        lifespan="on")
server = uvicorn.Server(config)
server.run(sockets=[sock])
