"""A loopback OTLP/HTTP logs receiver for tests/tests/audit_export.rs.

    receiver.py PORT_FILE OUT_DIR [PORT]

Listens on 127.0.0.1:PORT (0: any free port), writes the port to PORT_FILE once listening, and
decodes every POST /v1/logs body with the official protobuf definitions (the
`opentelemetry-proto` package) as an ExportLogsServiceRequest. For each log record it appends to
OUT_DIR/records.jsonl the gatehouse export record the attributes carry (`gatehouse.record` and
every other `gatehouse.*` attribute, typed as sent), and to OUT_DIR/logs.jsonl the whole record
(event name, times, body, every attribute, the resource and the scope). While the file
OUT_DIR/unavailable exists it answers 503 without keeping anything, and counts the refusal in
OUT_DIR/refused. While OUT_DIR/partial exists it answers 200 with a partial_success that
rejects one record, keeping nothing. A body that is not a valid request, or the wrong content type, is answered 400
and noted in OUT_DIR/errors.
"""

import json
import os
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsPartialSuccess,
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)

PORT_FILE, OUT = sys.argv[1], sys.argv[2]
PORT = int(sys.argv[3]) if len(sys.argv) > 3 else 0


def value(v):
    kind = v.WhichOneof("value")
    if kind == "string_value":
        return v.string_value
    if kind == "int_value":
        return v.int_value
    if kind == "bool_value":
        return v.bool_value
    if kind == "double_value":
        return v.double_value
    raise ValueError(f"unexpected attribute value {kind}")


def attrs(kvs):
    out = {}
    for kv in kvs:
        if kv.key in out:
            raise ValueError(f"attribute {kv.key} twice")
        out[kv.key] = value(kv.value)
    return out


def append(name, lines):
    with open(os.path.join(OUT, name), "a") as f:
        for line in lines:
            f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def answer(self, code, body=b"", ctype="text/plain"):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path != "/v1/logs":
            append("errors", [f"path {self.path}"])
            return self.answer(404)
        if os.path.exists(os.path.join(OUT, "unavailable")):
            append("refused", ["503"])
            return self.answer(503, b"collector unavailable")
        if self.headers.get("Content-Type") != "application/x-protobuf":
            append("errors", [f"content type {self.headers.get('Content-Type')}"])
            return self.answer(400)
        if os.path.exists(os.path.join(OUT, "partial")):
            append("refused", ["partial"])
            answer = ExportLogsServiceResponse(
                partial_success=ExportLogsPartialSuccess(rejected_log_records=1, error_message="test rejects one")
            )
            return self.answer(200, answer.SerializeToString(), "application/x-protobuf")
        try:
            req = ExportLogsServiceRequest()
            req.ParseFromString(body)
            records, logs = [], []
            for rl in req.resource_logs:
                resource = attrs(rl.resource.attributes)
                for sl in rl.scope_logs:
                    for lr in sl.log_records:
                        a = attrs(lr.attributes)
                        rec = {"record": a["gatehouse.record"]}
                        for k, v in a.items():
                            if k.startswith("gatehouse.") and k != "gatehouse.record":
                                rec[k[len("gatehouse."):]] = v
                        records.append(json.dumps(rec))
                        logs.append(json.dumps({
                            "event_name": lr.event_name,
                            "time_unix_nano": lr.time_unix_nano,
                            "observed_time_unix_nano": lr.observed_time_unix_nano,
                            "body": lr.body.string_value,
                            "attributes": a,
                            "resource": resource,
                            "scope": {"name": sl.scope.name, "version": sl.scope.version},
                        }))
        except Exception as e:  # noqa: BLE001 - any decoding failure is the test's failure
            append("errors", [f"decode: {e!r}"])
            return self.answer(400)
        append("records.jsonl", records)
        append("logs.jsonl", logs)
        self.answer(200, ExportLogsServiceResponse().SerializeToString(), "application/x-protobuf")


server = HTTPServer(("127.0.0.1", PORT), Handler)
tmp = PORT_FILE + ".tmp"
with open(tmp, "w") as f:
    f.write(str(server.server_address[1]))
os.rename(tmp, PORT_FILE)
server.serve_forever()
