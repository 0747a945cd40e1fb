"""LangChain's chat models against sidetrack: every case of the real-client matrix for one of
`langchain-openai` ChatOpenAI or `langchain-anthropic` ChatAnthropic, in one process.

Usage: python langchain_chat.py (openai|anthropic) GATEWAY_URL. Prints one JSON document,
{"cases": [{case, kind, ...}]}; crates/gateway/tests/real_clients.rs asserts it row by row. A case
that raises is reported with `error` and the others still run.
"""

import json
import sys

KINDS = ["openai", "anthropic", "bedrock"]
PROMPT = "What is the weather in Paris?"
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
        "required": ["city"],
    },
}


def model_for(library, base, model):
    if library == "openai":
        from langchain_openai import ChatOpenAI

        return ChatOpenAI(
            model=model,
            base_url=f"{base}/v1",
            api_key="caller-key",
            max_retries=0,
            timeout=20,
            stream_usage=True,
            include_response_headers=True,
        )
    from langchain_anthropic import ChatAnthropic

    return ChatAnthropic(
        model=model,
        base_url=base,
        api_key="caller-key",
        max_retries=0,
        timeout=20,
        max_tokens=256,
    )


def row(library, message):
    meta = message.response_metadata
    finish = meta.get("finish_reason") if library == "openai" else meta.get("stop_reason")
    calls = message.tool_calls
    usage = message.usage_metadata or {}
    headers = meta.get("headers") or {}
    return {
        "text": str(message.text),
        "finish": finish,
        "tool": {"name": calls[0]["name"], "args": calls[0]["args"]} if calls else None,
        "usage": {"input": usage.get("input_tokens"), "output": usage.get("output_tokens")},
        "served_by": headers.get("x-sidetrack-served-by"),
    }


def streamed(chat):
    whole = None
    for chunk in chat.stream(PROMPT):
        whole = chunk if whole is None else whole + chunk
    return whole


def main():
    library, base = sys.argv[1], sys.argv[2]
    modes = {
        "complete": lambda chat: chat.invoke(PROMPT),
        "stream": streamed,
        "tool": lambda chat: chat.bind_tools([WEATHER]).invoke(PROMPT),
        "stream_tool": lambda chat: streamed(chat.bind_tools([WEATHER])),
    }
    cases = []
    for kind in KINDS:
        for mode, run in modes.items():
            name = f"langchain-{library}/{mode}/{kind}"
            model = f"via-{kind}-langchain-{library}-{mode}"
            out = {"case": name, "kind": kind, "model": model}
            try:
                out.update(row(library, run(model_for(library, base, model))))
            except ImportError:
                raise
            except Exception as e:  # noqa: BLE001 - every failure becomes the case's row
                out["error"] = f"{type(e).__name__}: {e}"
            cases.append(out)
    print(json.dumps({"client": f"langchain-{library}", "cases": cases}))


if __name__ == "__main__":
    main()
