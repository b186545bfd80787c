"""What the bench scripts that measure real Claude Code requests share: a recorder that
keeps every POST body it gets (and answers 500, so the CLI sends nothing more), and one
`claude -p` turn (tests/cli, throwaway HOME, loopback only) against a base URL."""

import http.server
import json
import os
import pathlib
import subprocess
import threading

ROOT = pathlib.Path(__file__).resolve().parent.parent


class Recording:
    """A recorder on a free loopback port; `url`, and `biggest()` for the largest body
    received since the last call (Claude Code's agentic main turn)."""

    def __init__(self):
        bodies = self.bodies = []

        class Recorder(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                bodies.append(json.loads(self.rfile.read(int(self.headers["content-length"]))))
                self.send_response(500)
                self.send_header("content-type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"error": {"message": "recorded"}}')

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def biggest(self):
        body = max(self.bodies, key=lambda b: len(json.dumps(b)))
        self.bodies.clear()
        return body

    def close(self):
        self.server.shutdown()


def claude(base, home):
    """One `claude -p "list the files here"` turn against `base`."""
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env.update(HOME=str(home), ANTHROPIC_BASE_URL=base, ANTHROPIC_API_KEY="k", CLAUDE_CODE_MAX_RETRIES="0",
               CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", DISABLE_TELEMETRY="1", DISABLE_AUTOUPDATER="1")
    subprocess.run([str(ROOT / "tests/cli/node_modules/.bin/claude"), "-p", "list the files here"], env=env,
                   cwd=home, stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
