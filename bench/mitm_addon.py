"""mitmproxy addon for bench/run.sh: send every intercepted (decrypted) request to the
benchmark's mock upstream ($BENCH_MOCK_ADDR, host:port, plain HTTP) instead of the
origin, so mitmproxy's decrypted path is measured on loopback only."""

import os

HOST, PORT = os.environ["BENCH_MOCK_ADDR"].rsplit(":", 1)


def request(flow):
    flow.request.scheme = "http"
    flow.request.host = HOST
    flow.request.port = int(PORT)
