"""Single-flight: identical concurrent misses make one replica call.

Requests with the same entry id (the exact cache key) that miss while a call for that id is
running join it instead of calling a replica themselves. 50 identical first-time requests sent
at once used to reach the replicas 29 times (JSON) and 45 times (streamed); with flights they
reach them once.

- ``lead``: :class:`FlightStep`, join or lead; the leader's task publishes what
  ``ProduceStep.produce`` yields (the one copy of steps 5-8), and the cross-process lock;
- ``table``: :class:`Flight` (one call's head, chunks, record, end) and :class:`Flights`;
- ``consume``: each client's reply from a flight (the leader's, a follower's re-stamped stream
  or replay).

A flight that fails before a follower has sent anything makes that follower retry (one of them
becomes the next leader); a replica's 4xx is the same for everyone and is shared instead.
"""

from middleware.flight.lead import FlightStep
from middleware.flight.table import Flight, FlightFailed, Flights

__all__ = ["Flight", "FlightFailed", "FlightStep", "Flights"]
