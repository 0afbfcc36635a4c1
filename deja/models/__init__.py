"""Model files shipped with deja (package data): the verifier and the temporal classifier."""
