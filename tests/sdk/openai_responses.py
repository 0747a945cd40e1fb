"""Drives sidetrack's /v1/responses with the official `openai` SDK; prints one JSON object.

usage: openai_responses.py create|stream BASE_URL MODEL
"""
import json
import sys

import openai


def main() -> None:
    mode, base, model = sys.argv[1], sys.argv[2], sys.argv[3]
    client = openai.OpenAI(base_url=base + "/v1", api_key="sk-test", max_retries=0)
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
