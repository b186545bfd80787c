"""A TLS test origin for the transparent-mode test, run inside the test's network
namespace: serves HTTPS on the given address with its own certificate, prints one
`REQUEST <method> <path> <json headers>` line per request (the test reads them), and
answers JSON (an Anthropic-shaped message for POST /v1/messages)."""

import json
import socket
import ssl
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MARK = "hello-from-the-real-origin"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def record(self):
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        print(f"REQUEST {self.command} {self.path} {json.dumps(headers)}", flush=True)
        return body

    def do_GET(self):
        self.record()
        self.reply({"origin": MARK, "path": self.path})

    def do_POST(self):
        request = json.loads(self.record() or b"{}")
        self.reply({
            "id": "msg_origin", "type": "message", "role": "assistant", "model": request.get("model"),
            "content": [{"type": "text", "text": MARK}], "stop_reason": "end_turn",
            "stop_sequence": None, "usage": {"input_tokens": 5, "output_tokens": 4}})


def main():
    addr, port, cert, key = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.set_alpn_protocols(["http/1.1"])
    server_class = ThreadingHTTPServer
    if ":" in addr:
        class Server6(ThreadingHTTPServer):
            address_family = socket.AF_INET6
        server_class = Server6
    server = server_class((addr, port), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    print(f"origin listening on {addr}:{port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
