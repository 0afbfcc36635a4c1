"""Step 4's grey zone: a candidate under the request's cut-off but over the judge floor's is
put to the judge (``deja.semantic.judge``), and what the judge says is learnt.

:meth:`GreyZone.ask` returns the verdict the lookup may act on now: a remembered one, or sync
mode's fresh call; async mode asks in the background and returns None (a miss now). Every new
verdict, off the request path, becomes evidence about the candidate's entry (an alias's verdict
is its entry's, ``deja.semantic.learning``), and "same" promotes the question to an alias of
that entry (``deja.semantic.promote``), when the gateway and the tenant allow it, the
request's answer may be stored under its key, and a second opinion agrees: in async mode the
miss's own answer (answers that disagree are evidence against the entry), in sync mode a re-ask
of the question made as a shadow check (a verdict on the served hit, live precision too).
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from typing import Any

from deja.errors import CacheUnavailableError
from deja.request import GatewayRequest
from deja.semantic.index import ALIAS_FIELD
from deja.semantic.judge import Judge
from deja.semantic.learning import Learning
from deja.semantic.promote import Promoter
from deja.semantic.scope import SemanticQuery
from deja.semantic.shadow import ShadowChecks
from deja.semantic.verifier import Scored
from middleware.lookup import Lookup

Spawn = Callable[[Coroutine[Any, Any, None]], object]

#: Keys up for promotion remembered, so that each is tried once (lately).
TRIED_KEYS = 4096


def entry_of(cand: Scored) -> str:
    """The entry a candidate's answer belongs to: an alias's vector names its entry."""
    return str(cand.point.payload.get(ALIAS_FIELD) or cand.point.entry_id)


class GreyZone:
    """The judge on grey-zone candidates, and what its verdicts teach."""

    def __init__(
        self,
        judge: Judge,
        spawn: Spawn,
        promoter: Promoter | None = None,
        learning: Learning | None = None,
        shadow: ShadowChecks | None = None,
    ) -> None:
        self.judge = judge
        self.promoter = promoter
        self.learning = learning
        self.shadow = shadow
        self._tried: OrderedDict[str, None] = OrderedDict()
        self._spawn = spawn

    async def ask(
        self, req: GatewayRequest, lookup: Lookup, query: SemanticQuery, cand: Scored
    ) -> bool | None:
        """The verdict to act on now (True: serve ``cand``): a remembered one, or sync mode's
        fresh call; async mode asks in the background and says None (a miss now)."""
        judge = self.judge
        verdict = judge.known(query.text, cand.question, req.model)
        if verdict is None and judge.mode == "sync":
            verdict = await judge.verdict(query.text, cand.question, req.model)
            if verdict is not None:
                self._spawn(self.after_verdict(req, lookup, query, cand)(verdict))
        elif verdict is None:
            after = functools.partial(self.after_verdict(req, lookup, query, cand), served=False)
            judge.judge_later(query.text, cand.question, req.model, self._spawn, then=after)
        elif verdict:  # remembered (learnt when it came): this scope's question may promote
            self._spawn(self.after_verdict(req, lookup, query, cand)(True, learn=False))
        return verdict

    def promotes(self, req: GatewayRequest, lookup: Lookup) -> bool:
        """Whether a "same" verdict makes this request's question an alias: promotion on (the
        gateway's and the tenant's setting) and an answer that may be stored under its key."""
        return (
            self.promoter is not None
            and req.promote
            and lookup.entry_id is not None
            and lookup.storable
        )

    def after_verdict(
        self, req: GatewayRequest, lookup: Lookup, query: SemanticQuery, cand: Scored
    ) -> Callable[..., Coroutine[Any, Any, None]]:
        """What a verdict on (request, candidate) does, in the background: the entry learns a
        new one, and "same" promotes once a second opinion agrees (``served``: the entry's
        answer went out, so the question is re-asked as a shadow check; else the miss's own
        answer is compared). Each request key is tried once (lately)."""
        promoter, learning = self.promoter, self.learning
        key, vector, entry_id = lookup.entry_id, lookup.vector, entry_of(cand)
        promotes = self.promotes(req, lookup)
        score, similarity = cand.score, cand.point.score

        async def after(same: bool, *, learn: bool = True, served: bool = True) -> None:
            if learning is not None and learn:
                learning.judged(entry_id, score=score, same=same, source="judge")
            if not (same and promotes and promoter is not None and key is not None):
                return
            if not self.first_try(key):
                return
            if served:  # the entry's answer went out: no answer of the question's own
                if await self.reask(req, entry_id, similarity, score):
                    await promoter.promote(query, key, vector, entry_id)
                return
            outcome = await promoter.promote(query, key, vector, entry_id, confirm=True)
            if outcome == "disagreed" and learning is not None:  # the answers say "different"
                learning.judged(entry_id, score=score, same=False, source="shadow")

        return after

    def first_try(self, key: str) -> bool:
        """True the first time (lately) ``key`` is up for promotion: a question whose second
        opinion disagreed is not re-asked on every repeat."""
        tried = self._tried
        if key in tried:
            return False
        tried[key] = None
        if len(tried) > TRIED_KEYS:
            tried.popitem(last=False)
        return True

    async def reask(
        self, req: GatewayRequest, entry_id: str, similarity: float, score: float | None
    ) -> bool:
        """Sync mode's second opinion on a hit the judge served: the question re-asked as a
        shadow check (counted as one, and evidence through it). False without one."""
        shadow, promoter = self.shadow, self.promoter
        if shadow is None or promoter is None:
            return False
        try:
            entry = await promoter.exact.record(entry_id)
        except CacheUnavailableError:
            return False
        if entry is None:
            return False
        return await shadow.check(req, entry, similarity, score) == "agree"
