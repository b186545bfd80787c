"""The official `anthropic` and `openai` SDKs, as strict clients, parse the final reply
Glider gives when an agent loop passes its turn budget (`context.turn_budget.hard: 1`:
the tool call's follow-on is the second turn): Messages, Chat Completions and Responses,
streamed and not — a 200, one assistant text naming the key, and the dialect's own
end of turn."""

import uuid

import anthropic
import openai
import pytest

from conftest import running_glider

CONFIG = """
backends:
  - {{name: ollama, type: ollama, base_url: '{url}', models: [m-ollama]}}
routing: {{cloud_fallback: false, classifier: {{enabled: false}}}}
context: {{enabled: false, turn_budget: {{hard: 1}}}}
"""
CALL = 'weather in Paris? [[call:get_weather {"city":"Paris"}]]'
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
KEY = "context.turn_budget.hard"


@pytest.fixture(scope="module")
def glider():
    with running_glider(CONFIG) as running:
        yield running.match.group(1)


def session():
    """A session of its own for each loop (the budget is per episode of a session)."""
    return {"x-claude-code-session-id": f"sdk-{uuid.uuid4()}"}


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_sdk_parses_the_budget_stop(glider, stream):
    client = anthropic.Anthropic(base_url=glider, api_key="sk-ant-test", max_retries=0, timeout=30,
                                 default_headers=session())
    tools = [{"name": "get_weather", "description": "Weather for a city", "input_schema": SCHEMA}]
    messages = [{"role": "user", "content": CALL}]
    first = client.messages.create(model="m-ollama", max_tokens=200, tools=tools, messages=messages)
    call = next(block for block in first.content if block.type == "tool_use")
    messages += [
        {"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "18C"}]},
    ]
    if stream:
        with client.messages.stream(model="m-ollama", max_tokens=200, tools=tools, messages=messages) as s:
            text = "".join(s.text_stream)
            final = s.get_final_message()
    else:
        final = client.messages.create(model="m-ollama", max_tokens=200, tools=tools, messages=messages)
        text = final.content[0].text
    assert final.role == "assistant" and final.stop_reason == "end_turn"
    assert [block.type for block in final.content] == ["text"]
    assert KEY in text and "Glider stopped this agent loop" in text


@pytest.mark.parametrize("stream", [False, True])
def test_openai_chat_sdk_parses_the_budget_stop(glider, stream):
    client = openai.OpenAI(base_url=f"{glider}/v1", api_key="sk-test", max_retries=0, timeout=30,
                           default_headers=session())
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": SCHEMA}}]
    messages = [{"role": "user", "content": CALL}]
    first = client.chat.completions.create(model="m-ollama", messages=messages, tools=tools)
    call = first.choices[0].message.tool_calls[0]
    messages += [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "18C"},
    ]
    if stream:
        chunks = list(client.chat.completions.create(model="m-ollama", messages=messages, tools=tools, stream=True))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        calls = [c for c in chunks if c.choices and c.choices[0].delta.tool_calls]
    else:
        reply = client.chat.completions.create(model="m-ollama", messages=messages, tools=tools)
        text, finish = reply.choices[0].message.content, [reply.choices[0].finish_reason]
        calls = reply.choices[0].message.tool_calls or []
    assert finish == ["stop"] and not calls
    assert KEY in text and "Glider stopped this agent loop" in text


@pytest.mark.parametrize("stream", [False, True])
def test_openai_responses_sdk_parses_the_budget_stop(glider, stream):
    client = openai.OpenAI(base_url=f"{glider}/v1", api_key="sk-test", max_retries=0, timeout=30,
                           default_headers=session())
    tools = [{"type": "function", "name": "get_weather", "description": "Weather", "parameters": SCHEMA}]
    first = client.responses.create(model="m-ollama", input=CALL, tools=tools)
    call = next(item for item in first.output if item.type == "function_call")
    follow = [
        {"role": "user", "content": CALL},
        {"type": "function_call", "call_id": call.call_id, "name": "get_weather", "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "18C"},
    ]
    if stream:
        with client.responses.stream(model="m-ollama", input=follow, tools=tools) as s:
            final = s.get_final_response()
    else:
        final = client.responses.create(model="m-ollama", input=follow, tools=tools)
    assert final.status == "completed"
    assert [item.type for item in final.output] == ["message"]
    assert KEY in final.output_text and "Glider stopped this agent loop" in final.output_text
