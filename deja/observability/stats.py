"""Cache outcomes since start, per tenant (the admin API's ``/admin/cache/stats``)."""

from __future__ import annotations

from collections import Counter, defaultdict

from deja.request import Outcome


class Stats:
    """Counts of requests by tenant and ``X-Deja-Cache`` outcome, in this process."""

    def __init__(self) -> None:
        self._by_tenant: defaultdict[str, Counter[str]] = defaultdict(Counter)

    def record(self, tenant: str, outcome: Outcome) -> None:
        # The outcome is a StrEnum: it counts under its value without reading ``.value``.
        self._by_tenant[tenant][outcome] += 1

    def tenant(self, name: str) -> dict[str, int]:
        counts = self._by_tenant.get(name, Counter())
        row = {outcome.value: counts[outcome.value] for outcome in Outcome}
        return {"requests": sum(row.values()), **row}

    def tenants(self) -> dict[str, dict[str, int]]:
        return {name: self.tenant(name) for name in sorted(self._by_tenant)}

    def totals(self) -> dict[str, int]:
        total: Counter[str] = Counter()
        for counts in self._by_tenant.values():
            total.update(counts)
        row = {outcome.value: total[outcome.value] for outcome in Outcome}
        return {"requests": sum(row.values()), **row}
