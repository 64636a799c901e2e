"""Telemetry for operators: Prometheus metrics and OpenTelemetry spans of each request.

Both are :class:`~semisched.telemetry.observe.RequestObserver`\\ s that a
:class:`~semisched.Scheduler` builds when asked (``metrics=``, ``tracing=``):
:mod:`semisched.telemetry.prometheus` (the ``metrics`` extra) and
:mod:`semisched.telemetry.tracing` (``opentelemetry-api``, a no-op unless the
application configures an SDK). Neither ever records a prompt, a parameter or
a key.
"""
