// The Node `openai` SDK (Chat Completions and Responses) against sidetrack: every case of the real-client
// matrix in one process. Usage: node openai.mjs GATEWAY_URL. Prints one JSON document,
// {"cases": [{case, kind, ...}]}; crates/gateway/tests/real_clients.rs asserts it row by row.
// A case that throws is reported with `error` and the others still run.
import OpenAI from "openai";

const base = process.argv[2];
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "caller-key", maxRetries: 0, timeout: 20_000 });
const KINDS = ["openai", "anthropic", "bedrock"];
const messages = [{ role: "user", content: "What is the weather in Paris?" }];
const weather = {
  name: "get_weather",
  description: "The weather in a city",
  parameters: { type: "object", properties: { city: { type: "string" }, unit: { type: "string" } }, required: ["city"] },
};

function servedBy(response) {
  return response?.headers.get("x-sidetrack-served-by") ?? null;
}

function parseArgs(text) {
  try {
    return JSON.parse(text);
  } catch {
    return { unparsed: text };
  }
}

const chat = {
  // Plain `create`, the whole answer at once.
  async complete(model) {
    const { data, response } = await client.chat.completions.create({ model, messages }).withResponse();
    const choice = data.choices[0];
    return {
      text: choice.message.content,
      finish: choice.finish_reason,
      usage: { input: data.usage?.prompt_tokens, output: data.usage?.completion_tokens },
      served_by: servedBy(response),
    };
  },
  // `create({stream: true})` read chunk by chunk, with `chunk.choices[0]` as the SDK's example does
  // on every chunk but the usage one.
  async stream(model) {
    const { data: stream, response } = await client.chat.completions
      .create({ model, messages, stream: true, stream_options: { include_usage: true } })
      .withResponse();
    let text = "";
    let finish = null;
    let usage = null;
    let usageChunks = 0;
    for await (const chunk of stream) {
      if (chunk.usage) {
        usage = { input: chunk.usage.prompt_tokens, output: chunk.usage.completion_tokens };
        usageChunks += 1;
      }
      if (chunk.choices.length === 0) continue;
      text += chunk.choices[0].delta?.content ?? "";
      finish = chunk.choices[0].finish_reason ?? finish;
    }
    return { text, finish, usage, usage_chunks: usageChunks, served_by: servedBy(response) };
  },
  async tool(model) {
    const { data, response } = await client.chat.completions
      .create({ model, messages, tools: [{ type: "function", function: weather }] })
      .withResponse();
    const choice = data.choices[0];
    const call = choice.message.tool_calls?.[0];
    return {
      text: choice.message.content,
      finish: choice.finish_reason,
      tool: call ? { name: call.function.name, args: parseArgs(call.function.arguments) } : null,
      usage: { input: data.usage?.prompt_tokens, output: data.usage?.completion_tokens },
      served_by: servedBy(response),
    };
  },
  // The SDK's own stream accumulator (`chat.completions.stream` + `finalChatCompletion`).
  async stream_tool(model) {
    const stream = client.chat.completions.stream({
      model,
      messages,
      tools: [{ type: "function", function: weather }],
      stream_options: { include_usage: true },
    });
    const data = await stream.finalChatCompletion();
    const choice = data.choices[0];
    const call = choice.message.tool_calls?.[0];
    return {
      text: choice.message.content,
      finish: choice.finish_reason,
      tool: call ? { name: call.function.name, args: parseArgs(call.function.arguments) } : null,
      usage: { input: data.usage?.prompt_tokens, output: data.usage?.completion_tokens },
      served_by: null,
    };
  },
};

const responseTool = { type: "function", strict: false, ...weather };

function fromResponse(r) {
  const call = r.output.find((o) => o.type === "function_call");
  return {
    text: r.output_text,
    finish: r.status,
    tool: call ? { name: call.name, args: parseArgs(call.arguments) } : null,
    usage: { input: r.usage?.input_tokens, output: r.usage?.output_tokens },
  };
}

const responses = {
  async complete(model) {
    const { data, response } = await client.responses
      .create({ model, input: "What is the weather in Paris?" })
      .withResponse();
    return { ...fromResponse(data), served_by: servedBy(response) };
  },
  // Raw events: the text from the deltas, the rest from `response.completed`.
  async stream(model) {
    const { data: stream, response } = await client.responses
      .create({ model, input: "What is the weather in Paris?", stream: true })
      .withResponse();
    let text = "";
    let completed = null;
    const types = [];
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === "response.output_text.delta") text += event.delta;
      if (event.type === "response.completed") completed = event.response;
    }
    if (!completed) throw new Error(`no response.completed in ${types.join(",")}`);
    return { ...fromResponse(completed), text, served_by: servedBy(response) };
  },
  async tool(model) {
    const { data, response } = await client.responses
      .create({ model, input: "What is the weather in Paris?", tools: [responseTool] })
      .withResponse();
    return { ...fromResponse(data), served_by: servedBy(response) };
  },
  // The SDK's own accumulator (`responses.stream` + `finalResponse`).
  async stream_tool(model) {
    const stream = client.responses.stream({
      model,
      input: "What is the weather in Paris?",
      tools: [responseTool],
    });
    const data = await stream.finalResponse();
    return { ...fromResponse(data), served_by: null };
  },
};

const cases = [];
for (const [api, table] of [["chat", chat], ["responses", responses]]) {
  for (const kind of KINDS) {
    for (const [mode, run] of Object.entries(table)) {
      const name = `openai-${api}/${mode}/${kind}`;
      const model = `via-${kind}-openai-${api}-${mode}`;
      try {
        cases.push({ case: name, kind, model, ...(await run(model)) });
      } catch (e) {
        cases.push({ case: name, kind, model, error: `${e?.constructor?.name}: ${e?.message}` });
      }
    }
  }
}
process.stdout.write(JSON.stringify({ client: "openai", version: OpenAI.VERSION ?? null, cases }) + "\n");
