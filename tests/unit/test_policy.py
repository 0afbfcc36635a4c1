from __future__ import annotations

import pytest

from deja.errors import InvalidRequestError
from deja.request import CachePolicy
from middleware.policy import parse_policy


def policy(**headers: str) -> CachePolicy:
    lowered = {k.replace("_", "-").lower(): v for k, v in headers.items()}
    return parse_policy(lowered, default_ttl=100, max_ttl=1000)


def test_defaults() -> None:
    assert policy() == CachePolicy(read=True, write=True, max_age=None, ttl=100)


def test_no_cache_skips_lookup_but_stores() -> None:
    p = policy(cache_control="no-cache")
    assert (p.read, p.write) == (False, True)


def test_no_store_never_stores() -> None:
    p = policy(cache_control="no-store")
    assert (p.read, p.write) == (True, False)


def test_directives_combine_case_insensitively() -> None:
    p = policy(cache_control="No-Cache, NO-STORE, max-age=30")
    assert (p.read, p.write, p.max_age) == (False, False, 30.0)


def test_ttl_header_is_capped() -> None:
    assert policy(x_deja_ttl="50").ttl == 50
    assert policy(x_deja_ttl="999999").ttl == 1000


def test_ttl_zero_means_do_not_store() -> None:
    assert policy(x_deja_ttl="0").write is False


@pytest.mark.parametrize("bad", ["abc", "-5", "1.5", ""])
def test_bad_ttl_is_a_400_naming_the_header(bad: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        policy(x_deja_ttl=bad)
    assert info.value.param == "X-Deja-TTL"


def test_bad_max_age_is_a_400() -> None:
    with pytest.raises(InvalidRequestError):
        policy(cache_control="max-age=soon")


def test_threshold_header() -> None:
    assert policy(x_deja_threshold="0.97").min_similarity == 0.97
    assert policy().min_similarity is None
    for bad in ("high", "1.5", "-0.1"):
        with pytest.raises(InvalidRequestError):
            policy(x_deja_threshold=bad)
