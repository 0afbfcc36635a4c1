"""The composition root, by concept: ``replicas`` (the upstream side), ``stores`` (the exact
store, Redis, the flight lock), ``vectors`` (where the vector collections live), ``semantic``
(the embedder, the semantic cache, the verifier and the semantic step), ``corpora`` (the chunk
store, ``Corpora``, retrieval and the preload). ``app.gateway.Gateway.build`` calls them in
order on one ``AsyncExitStack``; each builder registers the close of what it opens there."""
