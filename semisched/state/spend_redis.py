"""Spend caps' books on the shared state's Redis (`semisched.state.spend`'s rules).

One hash per cap and period, ``<namespace>:spend:<cap key>:<period start>``: the field
``total`` (nano-dollars: settled plus reserved) and one field per outstanding
reservation. Each step is one Lua script, so a reservation checks and charges every cap
atomically. The period is computed inside the script from the server's ``TIME``
(calendar hours, days and months in UTC), so every process agrees on it; the script
names the period's key itself, which a single Redis server (what the budgets use too)
allows. A hash expires an hour after its period ends.

A reservation that was never settled (its process was killed) stays counted until its
period ends: the books overcount, never under.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from semisched.core.spend import SpendCap
from semisched.state.redis import RedisState
from semisched.state.spend import NANO, SpendGrant, nano

__all__ = ["RELEASE_SPEND", "RESERVE_SPEND", "SETTLE_SPEND", "RedisSpend"]

_PERIOD = """
if redis.replicate_commands then redis.replicate_commands() end
local function period(per, t)
  if per == 'hour' then local s = t - t % 3600 return s, s + 3600 end
  local day = t - t % 86400
  if per == 'day' then return day, day + 86400 end
  local days = day / 86400
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524)
    - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local first = days - (doy - math.floor((153 * mp + 2) / 5))
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400 + (m <= 2 and 1 or 0)
  local len = ({31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31})[m]
  if m == 2 and ((y % 4 == 0 and y % 100 ~= 0) or y % 400 == 0) then len = 29 end
  return first * 86400, (first + len) * 86400
end
local now = tonumber(redis.call('TIME')[1])
"""

# ARGV: member, nano-dollars, then per cap: key prefix, period, limit (nano-dollars).
# Returns {1, then per cap: book key, total} or {0, cap index, total, period end}.
RESERVE_SPEND = _PERIOD + """
local member, amount = ARGV[1], tonumber(ARGV[2])
local n = (#ARGV - 2) / 3
local books, ends = {}, {}
for i = 1, n do
  local s, e = period(ARGV[3 * i + 1], now)
  local book = ARGV[3 * i] .. ':' .. s
  books[i], ends[i] = book, e
  local total = tonumber(redis.call('HGET', book, 'total')) or 0
  local held = tonumber(redis.call('HGET', book, member)) or 0
  if total - held + amount > tonumber(ARGV[3 * i + 2]) then
    return {0, i, tostring(total), e}
  end
end
local out = {1}
for i = 1, n do
  local book = books[i]
  local held = tonumber(redis.call('HGET', book, member)) or 0
  redis.call('HSET', book, member, amount)
  out[#out + 1] = book
  out[#out + 1] = tostring(redis.call('HINCRBY', book, 'total', amount - held))
  redis.call('EXPIREAT', book, ends[i] + 3600)
end
return out
"""

# KEYS: the books. ARGV: member, nano-dollars (0: release).
SETTLE_SPEND = """
local member, amount = ARGV[1], tonumber(ARGV[2])
for _, book in ipairs(KEYS) do
  local held = tonumber(redis.call('HGET', book, member))
  if held then
    redis.call('HDEL', book, member)
    redis.call('HINCRBY', book, 'total', amount - held)
  end
end
"""

# ARGV: nano-dollars, then per cap: key prefix, period.
RECORD_SPEND = _PERIOD + """
local amount = tonumber(ARGV[1])
for i = 2, #ARGV, 2 do
  local s, e = period(ARGV[i + 1], now)
  local book = ARGV[i] .. ':' .. s
  redis.call('HINCRBY', book, 'total', amount)
  redis.call('EXPIREAT', book, e + 3600)
end
"""


# ARGV: member, then per cap: key prefix, period.
RELEASE_SPEND = _PERIOD + """
local member = ARGV[1]
for i = 2, #ARGV, 2 do
  local s = period(ARGV[i + 1], now)
  local book = ARGV[i] .. ':' .. s
  local held = tonumber(redis.call('HGET', book, member))
  if held then
    redis.call('HDEL', book, member)
    redis.call('HINCRBY', book, 'total', -held)
  end
end
"""


class RedisSpend:
    """Spend books on ``state``'s Redis (module docstring): open ``state`` first."""

    def __init__(self, state: RedisState) -> None:
        self.state = state
        self._scripts: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"RedisSpend({self.state!r})"

    async def _run(self, name: str, source: str, keys: list[str], args: list[Any]) -> Any:
        client = self.state.connection()
        script = self._scripts.get(name)
        if script is None:
            script = self._scripts[name] = client.register_script(source)
        with self.state.mapped(name):
            return await script(keys=keys, args=args)

    def _prefix(self, cap: SpendCap) -> str:
        return f"{self.state.namespace}:spend:{cap.key}"

    async def reserve_spend(
        self, request_id: str, usd: float, caps: Sequence[SpendCap]
    ) -> SpendGrant:
        if not caps:
            return SpendGrant(True)
        args: list[Any] = [self._member(request_id), nano(usd)]
        for cap in caps:
            args += [self._prefix(cap), cap.per, nano(cap.usd)]
        reply = await self._run("reserve_spend", RESERVE_SPEND, [], args)
        if int(reply[0]) == 0:
            cap = caps[int(reply[1]) - 1]
            return SpendGrant(False, cap=cap, spent_usd=int(_text(reply[2])) / NANO,
                              reset_at=float(reply[3]))  # fmt: skip
        books = tuple(_text(reply[1 + 2 * i]) for i in range(len(caps)))
        left = tuple((cap.key, cap.usd - int(_text(reply[2 + 2 * i])) / NANO)
                     for i, cap in enumerate(caps))  # fmt: skip
        return SpendGrant(True, keys=books, remaining_usd=left)

    async def settle_spend(self, request_id: str, usd: float, keys: Sequence[str]) -> None:
        if keys:
            await self._run("settle_spend", SETTLE_SPEND, list(keys),
                            [self._member(request_id), nano(usd)])  # fmt: skip

    async def record_spend(self, usd: float, caps: Sequence[SpendCap]) -> None:
        args: list[Any] = [nano(usd)]
        for cap in caps:
            args += [self._prefix(cap), cap.per]
        if caps:
            await self._run("record_spend", RECORD_SPEND, [], args)

    async def release_spend(self, request_id: str, caps: Sequence[SpendCap]) -> None:
        args: list[Any] = [self._member(request_id)]
        for cap in caps:
            args += [self._prefix(cap), cap.per]
        if caps:
            await self._run("release_spend", RELEASE_SPEND, [], args)

    def _member(self, request_id: str) -> str:
        return f"{self.state.worker}:{request_id}"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
