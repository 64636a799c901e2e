"""``semisched serve``: an OpenAI-compatible scheduling gateway (the ``gateway`` extra).

Any OpenAI client, in any language, points its base URL at the gateway; the
gateway maps its key to a tenant, reads the scheduling hints from headers,
schedules the call with a :class:`~semisched.Scheduler` (tenants, classes,
deadlines, overload control, routing over the fleet, budgets shared through
Redis across replicas) and forwards it, passing the upstream's answer back as
it came. A shell over the runtime, like the batch runner:

- :mod:`~semisched.gateway.config`: the TOML file and flags, checked;
- :mod:`~semisched.gateway.keys`: key hashes and their tenants;
- :mod:`~semisched.gateway.hints`: hint headers, and the fields stripped before forwarding;
- :mod:`~semisched.gateway.upstream`: the raw OpenAI-wire client of one upstream;
- :mod:`~semisched.gateway.tickets`: each request's phase, for disconnects and drains;
- :mod:`~semisched.gateway.answers`: outcomes as HTTP answers in OpenAI's error shape;
- :mod:`~semisched.gateway.app`: the app; :mod:`~semisched.gateway.routes`: one scheduled
  route per API (chat, completions, responses, embeddings); :mod:`~semisched.gateway.sse`:
  streams in each API's framing; :mod:`~semisched.gateway.status`: the status;
- :mod:`~semisched.gateway.server`: uvicorn, graceful shutdown, the demo's mock;
- :mod:`~semisched.gateway.cli`: ``semisched serve``.

Importing this package loads nothing of starlette or uvicorn; its modules do.
"""
