// The official openai npm package against semisched serve: the Responses API, one JSON call
// and one stream, and embeddings (the package asks for base64 and decodes it).
// Usage: node responses.mjs BASE_URL KEY; prints one JSON line of what it saw.
import OpenAI from "openai";

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
const metadata = { mock_output_tokens: "5" };
const reply = await client.responses.create({ model: "mock-1", input: "hi", metadata });
const stream = await client.responses.create({
  model: "mock-1", input: "hi", metadata, stream: true,
});
const types = [];
let text = "";
let last = null;
for await (const event of stream) {
  types.push(event.type);
  if (event.type === "response.output_text.delta") text += event.delta;
  last = event;
}
const capped = await client.responses.create({
  model: "mock-1", input: "hi", max_output_tokens: 2, metadata: { mock_output_tokens: "40" },
});
const embeddings = await client.embeddings.create({
  model: "mock-1", input: ["one", "two words"], dimensions: 8,
});
let refused = null;
try {
  await client.embeddings.create({ model: "mock-1", input: "one", stream: true });
} catch (err) {
  refused = { status: err.status, code: err.code, param: err.param };
}
console.log(JSON.stringify({
  output_text: reply.output_text, output_tokens: reply.usage.output_tokens,
  status: reply.status, types, text, last_type: last?.type ?? null,
  stream_output_text: last?.response?.output?.[0]?.content?.[0]?.text ?? null,
  stream_output_tokens: last?.response?.usage?.output_tokens ?? null,
  capped: { status: capped.status, output_tokens: capped.usage.output_tokens },
  embeddings: embeddings.data.map((d) => d.embedding.length),
  embedding_tokens: embeddings.usage.prompt_tokens, refused,
}));
