"""The upstream side, as one package: the replicas and how a request reaches one.

``ring`` (the bounded-load hash ring) and ``prefix`` (prefix keys) → ``pool`` (replicas,
weights, breakers, load, in-flight limits) → ``router`` (the routing policies) → ``admission``
(in-flight slots and the bounded wait for one) → ``deadline`` → ``upstream`` (the HTTP session,
failover, ``map_aiohttp_errors``) → ``health`` (probes and scrapes) and ``discovery`` (which
replica serves which model). Each module imports only the ones before it.
"""
