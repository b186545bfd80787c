"""A reply cut at the output cap Glider set (fit.max_output_tokens, not the client's
max_tokens) ends as a finished turn with a visible note, in every front dialect,
streaming and not; a reply cut at the client's own lower cap keeps its max_tokens /
length ending. Against the real llama-server, whose backend here caps at CAPPED_AT
tokens (far below what the prompt makes a model write)."""

import json

import anthropic
import openai
import pytest

from llama import CAPPED_AT, VIA_CAPPED, post_json, record_fitted_with, running_glider_on, running_llama_server

NOTE = f"[glider: reply cut at the local output cap of {CAPPED_AT} tokens (fit.max_output_tokens)]"
PROMPT = "Describe the sea in ten long sentences."
# Far above Glider's cap: the cap is Glider's, so the reply is not the client's max_tokens.
ASKED = 2000


@pytest.fixture(scope="module")
def glider():
    with running_llama_server() as url:
        with running_glider_on(url) as glider:
            yield glider


@pytest.fixture
def claude(glider):
    return anthropic.Anthropic(base_url=glider.match.group(1), api_key="unused", max_retries=0, timeout=180)


@pytest.fixture
def gpt(glider):
    return openai.OpenAI(base_url=f"{glider.match.group(1)}/v1", api_key="unused", max_retries=0, timeout=180)


def messages():
    return [{"role": "user", "content": PROMPT}]


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_reply_cut_at_glider_s_cap_ends_its_turn_with_the_note(claude, stream):
    if stream:
        with claude.messages.stream(model=VIA_CAPPED, max_tokens=ASKED, messages=messages()) as s:
            text = "".join(s.text_stream)
            reply = s.get_final_message()
        assert "".join(b.text for b in reply.content if b.type == "text") == text
    else:
        reply = claude.messages.create(model=VIA_CAPPED, max_tokens=ASKED, messages=messages())
        text = "".join(b.text for b in reply.content if b.type == "text")
    assert reply.stop_reason == "end_turn", reply
    assert text.endswith(NOTE) and len(text) > len(NOTE), text
    assert reply.usage.output_tokens <= CAPPED_AT


@pytest.mark.parametrize("stream", [False, True])
def test_openai_chat_reply_cut_at_glider_s_cap_stops_with_the_note(gpt, stream):
    if stream:
        chunks = list(gpt.chat.completions.create(model=VIA_CAPPED, max_tokens=ASKED, messages=messages(),
                                                  stream=True))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        assert finish == ["stop"], finish
    else:
        reply = gpt.chat.completions.create(model=VIA_CAPPED, max_tokens=ASKED, messages=messages())
        text = reply.choices[0].message.content
        assert reply.choices[0].finish_reason == "stop", reply
    assert text.endswith(NOTE) and len(text) > len(NOTE), text


@pytest.mark.parametrize("stream", [False, True])
def test_responses_reply_cut_at_glider_s_cap_completes_with_the_note(gpt, stream):
    if stream:
        events = list(gpt.responses.create(model=VIA_CAPPED, max_output_tokens=ASKED, input=PROMPT, stream=True))
        assert events[-1].type == "response.completed", [e.type for e in events]
        reply = events[-1].response
    else:
        reply = gpt.responses.create(model=VIA_CAPPED, max_output_tokens=ASKED, input=PROMPT)
    assert reply.status == "completed", reply
    assert reply.output_text.endswith(NOTE) and len(reply.output_text) > len(NOTE), reply.output_text


@pytest.mark.parametrize("stream", [False, True])
def test_ollama_reply_cut_at_glider_s_cap_is_done_with_stop_and_the_note(glider, stream):
    status, body = post_json(f"{glider.match.group(1)}/api/chat", {
        "model": VIA_CAPPED, "stream": stream, "options": {"num_predict": ASKED}, "messages": messages(),
    })
    assert status == 200, body
    lines = [json.loads(line) for line in body.splitlines() if line.strip()]
    assert lines[-1]["done"] is True and lines[-1]["done_reason"] == "stop", lines[-1]
    text = "".join(line["message"]["content"] for line in lines)
    assert text.endswith(NOTE) and len(text) > len(NOTE), text


def test_the_client_s_own_lower_cap_keeps_max_tokens(claude, gpt):
    own = CAPPED_AT // 2
    reply = claude.messages.create(model=VIA_CAPPED, max_tokens=own, messages=messages())
    assert reply.stop_reason == "max_tokens", reply
    assert all(NOTE not in b.text for b in reply.content if b.type == "text")
    chat = gpt.chat.completions.create(model=VIA_CAPPED, max_tokens=own, messages=messages())
    assert chat.choices[0].finish_reason == "length", chat
    assert NOTE not in chat.choices[0].message.content


def test_the_record_says_the_reply_was_cut_at_glider_s_cap(claude, glider):
    claude.messages.create(model=VIA_CAPPED, max_tokens=ASKED + 1, messages=messages())
    line = f"llama-capped: reply cut at the output cap of {CAPPED_AT} tokens: reported as a finished turn with a note"
    record = record_fitted_with(glider, f"llama-capped: max_tokens {ASKED + 1} -> {CAPPED_AT}")
    assert line in record["fitted"], record["fitted"]
    assert record["status"] == 200 and 0 < record["usage"]["output_tokens"] <= CAPPED_AT, record
