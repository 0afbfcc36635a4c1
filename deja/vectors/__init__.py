"""One vector layer under the semantic cache and the corpora.

``collection`` is the contract (a ``Collection`` of points: upsert, filtered search, delete,
scroll, facet, count), ``filters`` the one filter builder, ``edge`` and ``qdrant`` its two
backends: Qdrant Edge on local disk (the embedded default) and a Qdrant server through
``qdrant-client`` (or its local mode in tests). The payload schemas live with their owners, as
redis-vl keeps its cache's schema beside the cache and not in its index layer: the cache's
questions in ``deja.semantic.index``, the corpora's chunks in ``deja.corpus.index``. Which
backend a gateway uses is decided once, in ``app.wiring.stores``.
"""
