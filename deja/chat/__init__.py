"""What the gateway and the replica simulator (``sim/``) must agree on, written once here and
imported by both: the chat template a replica renders messages with (``template``; the prefix
key hashes the same tokens the simulator's prefix cache holds) and the judge prompt
(``judge``; the simulator recognises a judge request by it)."""
