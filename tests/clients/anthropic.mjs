// The Node `@anthropic-ai/sdk` (Messages) against sidetrack: every case of the real-client matrix in
// one process. Usage: node anthropic.mjs GATEWAY_URL. Prints one JSON document,
// {"cases": [{case, kind, ...}]}; crates/gateway/tests/real_clients.rs asserts it row by row.
// A case that throws is reported with `error` and the others still run.
import Anthropic from "@anthropic-ai/sdk";

const base = process.argv[2];
const client = new Anthropic({ baseURL: base, apiKey: "caller-key", maxRetries: 0, timeout: 20_000 });
const KINDS = ["openai", "anthropic", "bedrock"];
const messages = [{ role: "user", content: "What is the weather in Paris?" }];
const tools = [
  {
    name: "get_weather",
    description: "The weather in a city",
    input_schema: { type: "object", properties: { city: { type: "string" }, unit: { type: "string" } }, required: ["city"] },
  },
];

function servedBy(response) {
  return response?.headers.get("x-sidetrack-served-by") ?? null;
}

function fromMessage(m) {
  const text = m.content.filter((b) => b.type === "text").map((b) => b.text).join("");
  const call = m.content.find((b) => b.type === "tool_use");
  return {
    text,
    finish: m.stop_reason,
    tool: call ? { name: call.name, args: call.input } : null,
    usage: { input: m.usage?.input_tokens, output: m.usage?.output_tokens },
  };
}

const modes = {
  async complete(model) {
    const { data, response } = await client.messages.create({ model, max_tokens: 256, messages }).withResponse();
    return { ...fromMessage(data), served_by: servedBy(response) };
  },
  // Raw events, read as the SDK's docs show: text deltas, stop reason and output tokens from
  // `message_delta`, input tokens from `message_start` (or `message_delta`, which the API also fills).
  async stream(model) {
    const { data: stream, response } = await client.messages
      .create({ model, max_tokens: 256, messages, stream: true })
      .withResponse();
    let text = "";
    let finish = null;
    let input = null;
    let output = null;
    for await (const event of stream) {
      if (event.type === "message_start") {
        input = event.message.usage.input_tokens;
        output = event.message.usage.output_tokens;
      }
      if (event.type === "content_block_delta" && event.delta.type === "text_delta") text += event.delta.text;
      if (event.type === "message_delta") {
        finish = event.delta.stop_reason;
        output = event.usage.output_tokens;
        if (event.usage.input_tokens != null) input = event.usage.input_tokens;
      }
    }
    return { text, finish, tool: null, usage: { input, output }, served_by: servedBy(response) };
  },
  async tool(model) {
    const { data, response } = await client.messages
      .create({ model, max_tokens: 256, messages, tools })
      .withResponse();
    return { ...fromMessage(data), served_by: servedBy(response) };
  },
  // The SDK's own accumulator (`messages.stream` + `finalMessage`).
  async stream_tool(model) {
    const stream = client.messages.stream({ model, max_tokens: 256, messages, tools });
    const { response } = await stream.withResponse();
    const data = await stream.finalMessage();
    return { ...fromMessage(data), served_by: servedBy(response) };
  },
};

const cases = [];
for (const kind of KINDS) {
  for (const [mode, run] of Object.entries(modes)) {
    const name = `anthropic-messages/${mode}/${kind}`;
    const model = `via-${kind}-anthropic-messages-${mode}`;
    try {
      cases.push({ case: name, kind, model, ...(await run(model)) });
    } catch (e) {
      cases.push({ case: name, kind, model, error: `${e?.constructor?.name}: ${e?.message}` });
    }
  }
}
process.stdout.write(JSON.stringify({ client: "@anthropic-ai/sdk", cases }) + "\n");
