"""The scheduled routes: one `ApiRoute` per scheduled API, built from ``APIS``.

Each entry of `APIS` (chat completions,
completions, the Responses API, embeddings) is served at its ``path`` by one
`ApiRoute`, the same code for every API: a request goes key → tenant
(401 without one), body and hints (`semisched.gateway.hints`: 400/403),
``stream`` on an API that never streams (400), its class and deadline
(`semisched.gateway.priority`), the body's fields, model and service tier
(`semisched.gateway.params`: 400/403/404; nothing is sent for a refused
request), ``Scheduler.submit`` with the API, tenant, class, deadline and prior,
then the upstream's answer as it came (JSON, or SSE in the API's framing:
`semisched.gateway.sse`), or the outcome's answer
(`semisched.gateway.answers`).

What differs between APIs is data, looked up by the API's name: its forwarded
fields (`API_FIELDS`), their checks
(`API_RULES`: `semisched.gateway.field_rules`); its stream's framing is its spec's
(``ApiSpec.typed_events``). The route's name is the
API's: the ``route`` label of ``semisched_gateway_responses_total`` and the
access log's first word.

What this module is not: it owns no state (the `Gateway`
holds the scheduler, keys, rules and counters) and registers no route (the app does).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import anyio
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from semisched.errors import RequestError
from semisched.gateway.answers import (
    error_response,
    outcome_response,
    refused,
    shutting_down,
    unauthorized,
)
from semisched.gateway.hints import API_FIELDS, BadRequest, read_hints, request_headers
from semisched.gateway.limits import Refused, read_body
from semisched.gateway.params import parse_body, refuse_stream
from semisched.gateway.priority import DeadlinePlan
from semisched.gateway.sse import SSEResponse, watching
from semisched.gateway.tickets import Ticket, access_log, current_ticket, log_access
from semisched.gateway.upstream import RawAnswer
from semisched.runtime.apis import ApiSpec
from semisched.runtime.clock import loop_time
from semisched.runtime.streams import ScheduledStream

if TYPE_CHECKING:
    from semisched.gateway.app import Gateway

logger = logging.getLogger("semisched.gateway")

__all__ = ["ApiRoute"]


class ApiRoute:
    """``POST`` at one scheduled API's path (raw ASGI; module docstring).

    Args:
        gateway: The gateway whose scheduler, keys, rules and counters it uses.
        api: The scheduled API it serves.
    """

    def __init__(self, gateway: Gateway, api: ApiSpec) -> None:
        self.gateway = gateway
        self.api = api
        self.name = api.name
        self.fields = API_FIELDS[api.name]
        self.typed = api.typed_events

    def __repr__(self) -> str:
        return f"<ApiRoute POST {self.api.path}>"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """One request, supervised: an unexpected exception answers this request 500 in
        OpenAI's shape (logged once, counted), and the gateway goes on."""
        started = loop_time()
        ticket = Ticket("")
        try:
            response = await self._complete(scope, receive, ticket)
        except Exception as exc:
            logger.error("%s: request failed inside the gateway; answered 500", self.name,
                         exc_info=exc)  # fmt: skip
            response = error_response(500, "the gateway failed on this request (logged); "
                                      "other requests are unaffected", "server_error",
                                      "internal_error")  # fmt: skip
        self.gateway.count(self.name, response)
        try:
            await response(scope, receive, send)
        finally:
            if access_log.isEnabledFor(logging.INFO):
                log_access(self.name, ticket, response.status_code, started, loop_time())

    async def _body(self, headers: dict[str, str], receive: Receive) -> dict[str, Any] | Response:
        """The request's JSON object, or the answer that refuses it."""
        config = self.gateway.config
        try:
            raw = await read_body(receive, headers.get("content-length"), config.max_body_bytes)
            body = parse_body(raw, config.max_json_depth)
        except ClientDisconnect:
            return Response(status_code=499)
        except Refused as exc:  # too large (413: the rest is not read) or too deep
            return error_response(
                exc.status,
                str(exc),
                "invalid_request_error",
                exc.code,
                headers={"connection": "close"} if exc.status == 413 else None,
            )
        except BadRequest as exc:  # not a JSON object, NaN, a key twice
            return refused(exc)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return error_response(400, "the request body must be a JSON object",
                                  "invalid_request_error", "invalid_request")  # fmt: skip
        return body

    async def _complete(self, scope: Scope, receive: Receive, ticket: Ticket) -> Response:
        gateway = self.gateway
        if gateway.draining or gateway.scheduler is None:
            return shutting_down(gateway.config.retry_after_s)
        try:
            headers = request_headers(scope["headers"])
        except BadRequest as exc:  # authorization or a hint given twice
            return refused(exc)
        tenant = gateway.tenant(headers.get("authorization"))
        if tenant is None:
            return unauthorized()
        body = await self._body(headers, receive)
        if isinstance(body, Response):
            return body
        priority = body.get("priority")  # read before the hints strip it
        tier = body.get("service_tier") if "service_tier" in self.fields else None
        try:
            refuse_stream(body, self.api)  # before the hints strip it as a foreign field
            hints = read_hints(headers, body, tenant=tenant, allowed=self.fields,
                               classes=gateway.classes)  # fmt: skip
            klass = gateway.rules.klass(hints.klass, priority, tier, headers.get("authorization"))
            gateway.checks.check(body, api=self.api, tenant=tenant)
        except BadRequest as exc:  # a hint, a field, the model or the service tier
            return refused(exc)
        plan = gateway.rules.deadline(hints.deadline_s, tenant)  # a request's time is bounded
        call = dict(body, api=self.name, klass=klass, deadline=plan.seconds, prior=hints.prior,
                    tenant=tenant or None)  # fmt: skip
        answer_headers = hints.response_headers()  # decided before the call: short, ASCII
        if gateway.draining:  # it began while the body was read
            return shutting_down(gateway.config.retry_after_s)
        ticket.tenant = tenant
        result = await self._submit(ticket, call, receive)
        return self._answer(ticket, result, answer_headers, plan)

    async def _submit(self, ticket: Ticket, call: dict[str, Any], receive: Receive) -> Any:
        """``submit`` the call; a disconnect (or a drain) cancels it (``None`` is returned)."""
        scheduler = self.gateway.scheduler
        assert scheduler is not None
        token = current_ticket.set(ticket)
        result: Any = None
        watcher = watching(receive, ticket)
        try:
            with anyio.CancelScope() as scope:
                ticket.scope = scope
                try:
                    result = await scheduler.submit(**call)
                except (RequestError, ValueError, TypeError) as exc:
                    result = exc
        finally:
            watcher.cancel()
            ticket.scope = None
            current_ticket.reset(token)
        if scope.cancelled_caught:
            phase = "in_flight" if ticket.cancelled_in == "in_flight" else "queued"
            self.gateway.cancelled[phase] += 1
            return None
        return result

    def _answer(
        self, ticket: Ticket, result: Any, headers: dict[str, str], plan: DeadlinePlan
    ) -> Response:
        gateway = self.gateway
        if result is None:  # cancelled
            if ticket.reason == "drain":
                return shutting_down(gateway.config.retry_after_s)
            return Response(status_code=499)  # the client is gone: nobody reads it
        if isinstance(result, RequestError):
            shed = gateway.rules.shed_answer(plan, result, gateway.drain_s)  # a gateway deadline
            return shed or outcome_response(
                result, drain_retry_after_s=gateway.config.retry_after_s
            )
        if isinstance(result, ValueError | TypeError):
            return error_response(400, str(result), "invalid_request_error", "invalid_request")
        if isinstance(result, ScheduledStream):
            return SSEResponse(result, ticket, headers, on_cancel=gateway.stream_cancelled,
                               typed=self.typed)  # fmt: skip
        assert isinstance(result, RawAnswer)
        return Response(result.content, result.status_code, headers=headers,
                        media_type="application/json")  # fmt: skip
