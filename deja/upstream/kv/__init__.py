"""Routing by what each replica really holds, from vLLM's KV-cache events.

:mod:`~deja.upstream.kv.events` (one ZMQ subscriber per replica, replay on a gap, else drop and
say so), :mod:`~deja.upstream.kv.index` (the resident block set per replica),
:mod:`~deja.upstream.kv.match` (a request's block keys: local tokenizer, chat template, vLLM's
hashing), :mod:`~deja.upstream.kv.route` (scoring resident prefix against load),
:mod:`~deja.upstream.kv.metrics`. The hashing and wire format live in :mod:`deja.kvcache`,
shared with the simulator.
"""
