"""The fleet layer of the pure core: endpoints' state, which endpoints can take a request,
and the routing policies."""
