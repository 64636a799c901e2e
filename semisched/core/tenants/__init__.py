"""The tenant layer of the pure core: tenants and service classes, lanes and usage, and
the tenant policies."""
