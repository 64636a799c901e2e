"""``semisched serve``: an OpenAI-compatible scheduling gateway (the ``gateway`` extra).

Any OpenAI client, in any language, points its base URL at the gateway; the
gateway maps its key to a tenant, reads the scheduling hints from headers,
schedules the call with a [`Scheduler`][semisched.Scheduler] (tenants, classes,
deadlines, overload control, routing over the fleet, budgets shared through
Redis across replicas) and forwards it, passing the upstream's answer back as
it came. A shell over the runtime, like the batch runner:

- `config`: the TOML file and flags, checked;
- `keys`: key hashes and their tenants;
- `hints`: hint headers, and the fields stripped before forwarding;
- `upstream`: the raw OpenAI-wire client of one upstream;
- `tickets`: each request's phase, for disconnects and drains;
- `answers`: outcomes as HTTP answers in OpenAI's error shape;
- `app`: the app; `routes`: one scheduled
  route per API (chat, completions, responses, embeddings); `sse`:
  streams in each API's framing; `status`: the status;
- `server`: uvicorn, graceful shutdown, the demo's mock;
- `cli`: ``semisched serve``.

Importing this package loads nothing of starlette or uvicorn; its modules do.
"""
