"""The team deployment of docs/scale.md (issue 17): Glider's local backend is a real vLLM
Router (PyPI `vllm-router`, its prebuilt Rust binary) in front of three OpenAI-compatible
workers on loopback, each logging the requests it served. Several Claude Code-like
sessions go through Glider; from the workers' logs each session stayed on one worker,
under the router's default `cache_aware` policy (which keys on the prompt's token ids,
got from each worker's `POST /v1/chat/completions/render` as vLLM serves it, so it needs
the session's prefix stable: `context.bound_local: false`) and under `consistent_hash` (which hashes the
`x-session-id` header Glider sends). Stopping a worker moves its sessions to the others
and no request fails."""

import json
import shutil
import socket
import tempfile
import threading
import urllib.request

import pytest

from conftest import ChatBackend, Process, poll, start_glider

ROUTER = shutil.which("vllm-router")
SESSIONS = 6
SYSTEM = "You are a coding agent working in a large repository."


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Worker:
    """One mock vLLM worker serving on a thread; `sessions()` says which sessions it
    answered, in order."""

    def __init__(self):
        self.server = ChatBackend()
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.root = self.server.url.removesuffix("/v1")

    def sessions(self):
        """The session key (`x-session-id`, Glider's digest of Claude Code's session
        id) of each request served, in order. The body cannot say: once a session has
        a continuity record, Glider sends a local model only the current episode."""
        with self.server.lock:
            return list(self.server.session_keys)

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def start_router(workers, policy):
    port = free_port()
    router = Process(
        [ROUTER, "--host", "127.0.0.1", "--port", str(port), "--policy", policy,
         "--worker-urls", *[w.root for w in workers],
         # Find a stopped worker within a second, and retry its request elsewhere.
         "--health-check-interval-secs", "1", "--health-failure-threshold", "1",
         "--cb-failure-threshold", "1", "--retry-max-retries", "3",
         "--retry-initial-backoff-ms", "50", "--log-level", "info"],
        r"Starting server on",  # then readiness is polled: the line comes before the bind
        timeout=30,
    )
    url = f"http://127.0.0.1:{port}"

    def ready():
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as reply:
                return reply.status == 200
        except OSError:
            return False

    if not poll(ready, timeout=30):
        router.stop()
        raise RuntimeError(f"vllm-router did not become ready: {''.join(router.lines)}")
    router.url = url
    return router


def task(session):
    """A long task statement of its own per session: what a prefix cache keys on."""
    return " ".join(f"file{session}_{i}.rs" for i in range(150))


def ask(gateway, session, turn):
    """Turn `turn` of session `session`, as Claude Code sends it: the same system prompt,
    the conversation so far, and its session header."""
    messages = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": f"session {session}: start the task. " + task(session)}]
    for t in range(1, turn):
        messages += [{"role": "assistant", "content": f"done step {t}"},
                     {"role": "user", "content": f"now step {t + 1}"}]
    body = json.dumps({"model": "m-vllm", "messages": messages, "max_tokens": 50}).encode()
    request = urllib.request.Request(
        f"{gateway}/v1/chat/completions", data=body, method="POST",
        headers={"content-type": "application/json",
                 "x-claude-code-session-id": f"router-session-{session}"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        assert reply.status == 200
        answer = json.loads(reply.read())
    assert answer["choices"][0]["message"]["content"].startswith("reply ")


def owners(workers):
    """Session tag → the set of workers (by index) that served it."""
    served = {}
    for index, worker in enumerate(workers):
        for tag in worker.sessions():
            served.setdefault(tag, set()).add(index)
    return served


@pytest.mark.parametrize("policy", ["cache_aware", "consistent_hash"])
def test_sessions_stay_on_one_worker_behind_the_router(policy):
    # cache_aware keys on the prompt's text, so it runs with `context.bound_local:
    # false` (the conversation as the CLI sent it): with bounding on, each request's
    # continuity record changes the system text and the router splits the session
    # (docs/scale.md). consistent_hash keys on x-session-id and runs with the defaults.
    if ROUTER is None:
        pytest.fail("vllm-router is not installed: `pip install vllm-router` (.ci/run installs it)")
    workers = [Worker() for _ in range(3)]
    router = glider = None
    try:
        router = start_router(workers, policy)
        with tempfile.TemporaryDirectory() as tmp:
            config = f"""
backends:
  - {{name: team, type: vllm, base_url: '{router.url}/v1', models: [m-vllm]}}
routing: {{cloud_fallback: false, classifier: {{enabled: false}}}}
context: {{bound_local: {"false" if policy == "cache_aware" else "true"}}}
"""
            path = f"{tmp}/glider.yaml"
            with open(path, "w") as f:
                f.write(config)
            glider = start_glider(path, f"{tmp}/home")
            gateway = glider.match.group(1)
            for turn in (1, 2, 3):
                for session in range(SESSIONS):
                    ask(gateway, session, turn)
            before = owners(workers)
            # Glider's own calls (the summarizer building a continuity record) carry
            # no session key; the sessions' requests all do.
            before.pop(None, None)
            assert len(before) == SESSIONS, before
            for tag, served_by in before.items():
                assert len(served_by) == 1, (
                    f"{policy}: session {tag} went to workers {served_by}; the router said:\n"
                    + router.output()[-12000:])
            # One key per session, the same on every request, never the client's id.
            assert None not in before and not any("router-session" in k for k in before), before

            # Stop the busiest worker: its sessions move, the others stay, none fails.
            busiest = max(range(3), key=lambda i: len(workers[i].sessions()))
            lost = {tag for tag, served_by in before.items() if busiest in served_by}
            workers[busiest].stop()
            counts = [len(w.sessions()) for w in workers]
            for session in range(SESSIONS):
                ask(gateway, session, 4)
            after = {}
            for index, worker in enumerate(workers):
                for tag in worker.sessions()[counts[index]:]:
                    if tag is None:
                        continue
                    after.setdefault(tag, set()).add(index)
            assert len(after) == SESSIONS, after
            for tag, served_by in after.items():
                assert busiest not in served_by
                if tag not in lost and policy == "consistent_hash":
                    assert served_by == before[tag], f"session {tag} moved off a live worker"
    finally:
        if glider:
            glider.stop()
        if router:
            router.stop()
        for worker in workers:
            if worker.thread.is_alive():
                worker.stop()
