"""Drives sidetrack's `POST /v1/embeddings` with the official `openai` SDK; prints one JSON object.

usage: openai_embeddings.py BASE_URL MODEL TEXT [TEXT ...]
The SDK's own default encoding (it asks for base64 and decodes it) is kept. Prints the vectors'
lengths, the cosine of the first two vectors (when two texts are given), the usage, the model and
`x-sidetrack-served-by`.
"""
import json
import math
import sys

import openai


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def main() -> None:
    base, model, texts = sys.argv[1], sys.argv[2], sys.argv[3:]
    client = openai.OpenAI(base_url=base + "/v1", api_key="sk-test", max_retries=0)
    raw = client.embeddings.with_raw_response.create(model=model, input=texts)
    resp = raw.parse()
    vectors = [d.embedding for d in resp.data]
    out = {
        "status": raw.status_code,
        "served_by": raw.headers.get("x-sidetrack-served-by"),
        "lengths": [len(v) for v in vectors],
        "indexes": [d.index for d in resp.data],
        "model": resp.model,
        "prompt_tokens": resp.usage.prompt_tokens,
        "total_tokens": resp.usage.total_tokens,
        "cosine": cosine(vectors[0], vectors[1]) if len(vectors) > 1 else None,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
