"""Telemetry for operators: Prometheus metrics and OpenTelemetry spans of each request.

Both are [`RequestObserver`][semisched.telemetry.observe.RequestObserver]s that a
[`Scheduler`][semisched.Scheduler] builds when asked (``metrics=``, ``tracing=``):
`semisched.telemetry.prometheus` (the ``metrics`` extra) and
`semisched.telemetry.tracing` (``opentelemetry-api``, a no-op unless the
application configures an SDK). Neither ever records a prompt, a parameter or
a key.
"""
