"""Stateful Responses through Glider with the official `openai` SDK: a response is
stored, `previous_response_id` sends the stored chain to the backend (whatever it is:
here an OpenAI-compatible local server that never saw the earlier turns), GET and
DELETE /v1/responses/{id}, `store: false`, and a Glider whose context store is off
answering a typed 400 instead of dropping the earlier turns.

The backend is conftest's `ChatBackend`, a small Chat Completions server that records
each body it gets (the mock binary keeps no log)."""

import contextlib
import pathlib
import tempfile
import threading

import openai
import pytest

from conftest import ChatBackend, start_glider


@contextlib.contextmanager
def glider_on_backend(context_enabled):
    backend = ChatBackend()
    threading.Thread(target=backend.serve_forever, daemon=True).start()
    with tempfile.TemporaryDirectory() as tmp:
        config = pathlib.Path(tmp) / "glider.yaml"
        config.write_text(
            f"backends:\n  - {{name: local, type: vllm, base_url: '{backend.url}', models: [m-local]}}\n"
            "routing: {cloud_fallback: false, classifier: {enabled: false}}\n"
            # The summarizer would ask this backend too (off the request path): off, so
            # its log holds the SDK's requests alone. Bounding off: with it, this local
            # backend would get the continuity record and the current episode instead of
            # the expanded chain (docs/responses.md), and the chain is what is checked.
            f"context: {{enabled: {'true' if context_enabled else 'false'}, bound_local: false, "
            "summarizer: {enabled: false}}\n")
        glider = start_glider(config, pathlib.Path(tmp) / "home")
        try:
            client = openai.OpenAI(base_url=f"{glider.match.group(1)}/v1", api_key="sk-test", max_retries=0,
                                   timeout=30)
            yield client, backend
        finally:
            glider.stop()
            backend.shutdown()
            backend.server_close()


@pytest.fixture(scope="module")
def stored():
    with glider_on_backend(context_enabled=True) as running:
        yield running


@pytest.fixture(scope="module")
def unstored():
    with glider_on_backend(context_enabled=False) as running:
        yield running


def sent_turns(backend):
    """(role, text) of each message of the last body the backend got."""
    messages = backend.bodies[-1]["messages"]
    return [(m["role"], m["content"] if isinstance(m["content"], str) else "".join(p["text"] for p in m["content"]))
            for m in messages]


def create(client, stream, **kwargs):
    if not stream:
        return client.responses.create(model="m-local", **kwargs)
    with client.responses.stream(model="m-local", **kwargs) as events:
        for _ in events:
            pass
        return events.get_final_response()


@pytest.mark.parametrize("stream", [False, True])
def test_previous_response_id_sends_the_stored_chain(stored, stream):
    client, backend = stored
    first = create(client, stream, input="my name is Ada")
    # Asked at once: the follow-up must find what was just stored.
    second = create(client, stream, input="what is my name?", previous_response_id=first.id)
    assert sent_turns(backend) == [("user", "my name is Ada"), ("assistant", first.output_text),
                                   ("user", "what is my name?")]
    third = create(client, stream, input=[{"role": "user", "content": "and again?"}], previous_response_id=second.id)
    assert sent_turns(backend) == [("user", "my name is Ada"), ("assistant", first.output_text),
                                   ("user", "what is my name?"), ("assistant", second.output_text),
                                   ("user", "and again?")]
    assert "previous_response_id" not in backend.bodies[-1]
    assert third.output_text.startswith("reply ")


def test_a_stored_response_is_retrieved_and_deleted(stored):
    client, _ = stored
    reply = client.responses.create(model="m-local", input="remember me")
    got = client.responses.retrieve(reply.id)
    assert got.id == reply.id
    assert got.output_text == reply.output_text
    client.responses.delete(reply.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(reply.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(reply.id)
    with pytest.raises(openai.BadRequestError, match="not found"):
        client.responses.create(model="m-local", input="next", previous_response_id=reply.id)


def test_store_false_is_not_stored(stored):
    client, backend = stored
    reply = client.responses.create(model="m-local", input="forget me", store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(reply.id)
    sent = len(backend.bodies)
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="m-local", input="next", previous_response_id=reply.id)
    assert refused.value.body["param"] == "previous_response_id"
    assert len(backend.bodies) == sent, "nothing was sent without its history"


def test_with_the_store_off_previous_response_id_is_a_typed_400(unstored):
    client, backend = unstored
    reply = client.responses.create(model="m-local", input="hello")
    assert reply.output_text.startswith("reply ")
    with pytest.raises(openai.BadRequestError, match="context.enabled is false") as refused:
        client.responses.create(model="m-local", input="next", previous_response_id=reply.id)
    assert refused.value.body["param"] == "previous_response_id"
    assert len(backend.bodies) == 1
    with pytest.raises(openai.BadRequestError, match="context.enabled is false"):
        client.responses.retrieve(reply.id)
