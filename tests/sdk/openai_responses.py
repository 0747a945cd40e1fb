"""Drives sidetrack's /v1/responses with the official `openai` SDK; prints one JSON object.

usage: openai_responses.py create|stream|usage_matrix BASE_URL MODEL
`usage_matrix` takes MODEL as a comma-separated list and reports, per model, the usage of a
non-streamed response and the usage of each streamed `response.completed` event:
`{"MODEL": {"complete": {...}, "stream": [{...}, ...]}}`.
"""
import json
import sys

import openai


def usage_of(u) -> dict:
    return {"input": u.input_tokens, "output": u.output_tokens, "total": u.total_tokens}


def usage_matrix(client: openai.OpenAI, models: list) -> dict:
    out = {}
    for model in models:
        done = client.responses.create(model=model, input="hi")
        completed = []
        for event in client.responses.create(model=model, input="hi", stream=True):
            if event.type == "response.completed":
                completed.append(usage_of(event.response.usage) if event.response.usage else None)
        out[model] = {"complete": usage_of(done.usage), "stream": completed}
    return out


def main() -> None:
    mode, base, model = sys.argv[1], sys.argv[2], sys.argv[3]
    client = openai.OpenAI(base_url=base + "/v1", api_key="sk-test", max_retries=0)
    if mode == "usage_matrix":
        print(json.dumps(usage_matrix(client, model.split(","))))
        return
    out = {"text": "", "error": None, "events": []}
    try:
        if mode == "create":
            resp = client.responses.create(model=model, input="hi")
            out["text"] = resp.output_text
            out["status"] = resp.status
            out["usage"] = {"input": resp.usage.input_tokens, "output": resp.usage.output_tokens}
        elif mode == "stream":
            for event in client.responses.create(model=model, input="hi", stream=True):
                out["events"].append(event.type)
                if event.type == "response.output_text.delta":
                    out["text"] += event.delta
        else:
            raise SystemExit(f"unknown mode {mode}")
    except openai.APIError as e:
        out["error"] = {"class": type(e).__name__, "message": str(e)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
