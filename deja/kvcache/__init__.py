"""vLLM's prefix-cache block hashes and KV-cache event wire format, shared by the simulator
(which publishes the events) and the gateway (which subscribes to them and routes by them).

Kept apart from both so that neither imports the other: :mod:`deja.kvcache.blockhash` (how
vLLM hashes a block of token ids), :mod:`deja.kvcache.wire` (the ZMQ multipart messages and
their msgpack bodies).
"""
