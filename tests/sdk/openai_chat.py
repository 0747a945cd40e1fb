"""Drives sidetrack with the official `openai` SDK; prints one JSON object for the Rust test.

usage: openai_chat.py complete|stream|stream_example|stream_usage|usage_matrix BASE_URL MODEL
`stream_example` reads every chunk as OpenAI's own streaming example does (`chunk.choices[0]`,
which raises IndexError on a `choices: []` chunk); `stream_usage` asks for the usage chunk
(`stream_options.include_usage`) and reports it. `usage_matrix` takes MODEL as a comma-separated
list and reports, per model, the usage of a non-streamed call and the usage chunks of a stream with
`include_usage`: `{"MODEL": {"complete": {...}, "stream": [{...}, ...]}}`.
The client keeps the SDK defaults (max_retries=2), so a test can prove the SDK did not retry.
"""
import json
import sys

import openai


def usage_matrix(client: openai.OpenAI, models: list, messages: list) -> dict:
    out = {}
    for model in models:
        done = client.chat.completions.create(model=model, messages=messages)
        chunks = []
        stream = client.chat.completions.create(
            model=model, messages=messages, stream=True, stream_options={"include_usage": True},
        )
        for chunk in stream:
            if chunk.usage is not None:
                chunks.append({"input": chunk.usage.prompt_tokens, "output": chunk.usage.completion_tokens,
                               "total": chunk.usage.total_tokens, "choices": len(chunk.choices)})
        out[model] = {
            "complete": {"input": done.usage.prompt_tokens, "output": done.usage.completion_tokens,
                         "total": done.usage.total_tokens},
            "stream": chunks,
        }
    return out


def main() -> None:
    mode, base, model = sys.argv[1], sys.argv[2], sys.argv[3]
    client = openai.OpenAI(base_url=base + "/v1", api_key="sk-test")
    messages = [{"role": "user", "content": "hi"}]
    if mode == "usage_matrix":
        print(json.dumps(usage_matrix(client, model.split(","), messages)))
        return
    out = {"text": "", "chunks": 0, "error": None, "status": None}
    try:
        if mode == "complete":
            raw = client.chat.completions.with_raw_response.create(model=model, messages=messages)
            out["status"] = raw.status_code
            out["served_by"] = raw.headers.get("x-sidetrack-served-by")
            out["text"] = raw.parse().choices[0].message.content
        elif mode == "stream":
            stream = client.chat.completions.create(model=model, messages=messages, stream=True)
            parts = []
            for chunk in stream:
                out["chunks"] += 1
                if chunk.choices and chunk.choices[0].delta.content:
                    parts.append(chunk.choices[0].delta.content)
                out["text"] = "".join(parts)
        elif mode == "stream_example":
            stream = client.chat.completions.create(model=model, messages=messages, stream=True)
            for chunk in stream:
                out["chunks"] += 1
                out["text"] += chunk.choices[0].delta.content or ""
        elif mode == "stream_usage":
            stream = client.chat.completions.create(
                model=model, messages=messages, stream=True,
                stream_options={"include_usage": True},
            )
            out["usage_chunks"] = []
            for chunk in stream:
                out["chunks"] += 1
                if chunk.choices:
                    out["text"] += chunk.choices[0].delta.content or ""
                elif chunk.usage is not None:
                    out["usage_chunks"].append(
                        {"prompt_tokens": chunk.usage.prompt_tokens,
                         "completion_tokens": chunk.usage.completion_tokens})
        else:
            raise SystemExit(f"unknown mode {mode}")
    except openai.APIError as e:
        out["error"] = {
            "class": type(e).__name__,
            "is_status_error": isinstance(e, openai.APIStatusError),
            "status": getattr(e, "status_code", None),
            "type": getattr(e, "type", None),
            "message": e.message,
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
