"""The agreed release of symmetric objects, without a GPU: what the PEs' exchange decides.

A drop frees nothing; it queues the object's sequence number. At a collection point the PEs
exchange what they queued (in rounds of a fixed width) and free, newest first, exactly what
every PE queued. _simulate_release runs that exchange over given queues, as the PEs would."""

import random

import pytest

import nvshmem_rs as nv
from nvshmem_rs import _native

# Numbers per PE per round (release.rs: WIDTH - 2).
PER_ROUND = 254


def simulate(queues):
    return _native._simulate_release([list(q) for q in queues])


def test_only_what_every_pe_released_is_freed_newest_first():
    # PE 0 dropped A(1), B(2), C(3); PE 1 dropped C then B (another order), still holds A.
    freed, rounds = simulate([[1, 2, 3], [3, 2]])
    assert freed == [3, 2]
    assert rounds == 1


def test_the_order_of_drops_does_not_matter():
    assert simulate([[5, 1, 9], [9, 5, 1]]) == simulate([[1, 5, 9], [1, 5, 9]])
    assert simulate([[5, 1, 9], [9, 5, 1]])[0] == [9, 5, 1]


def test_nothing_queued_or_nothing_in_common_frees_nothing():
    assert simulate([[], []]) == ([], 1)
    assert simulate([[1, 2], [3, 4]]) == ([], 1)
    assert simulate([[1, 2], []]) == ([], 1)


def test_one_pe_is_the_whole_job():
    assert simulate([[4, 2, 7]])[0] == [7, 4, 2]


def test_pes_that_created_different_numbers_free_nothing():
    # Their sequence numbers would name different objects: refused, nothing freed.
    with pytest.raises(ValueError, match="PE 0 created 3 symmetric objects and PE 1 4"):
        _native._simulate_release([[1], [1]], [3, 4])
    assert _native._simulate_release([[1], [1]], [4, 4]) == ([1], 1)


def test_numbers_one_pe_holds_on_to_do_not_block_the_rest():
    # PE 0 released 1..1000; PE 1 still holds all but three of them: the lists of the first
    # rounds are full of numbers PE 1 holds, and later rounds still find the three.
    freed, rounds = simulate([range(1, 1001), [500, 999, 1000]])
    assert freed == [1000, 999, 500]
    assert rounds > 1


def test_full_rounds_on_every_pe():
    q = list(range(1, 3 * PER_ROUND + 10))
    freed, rounds = simulate([q, q, q])
    assert freed == sorted(q, reverse=True)
    assert rounds == 4


@pytest.mark.parametrize("seed", range(20))
def test_random_queues_free_exactly_their_intersection(seed):
    rng = random.Random(seed)
    n = rng.randint(2, 5)
    universe = range(1, rng.choice([50, 600, 2000]))
    queues = [sorted(rng.sample(universe, rng.randint(0, len(universe)))) for _ in range(n)]
    # Many numbers in common sometimes.
    if seed % 3 == 0:
        common = rng.sample(universe, len(universe) // 2)
        queues = [sorted(set(q) | set(common)) for q in queues]
    expected = set(queues[0]).intersection(*queues[1:])
    freed, _ = simulate(queues)
    assert freed == sorted(expected, reverse=True)


def test_nothing_is_pending_before_init_and_collect_needs_the_runtime():
    assert nv.pending_releases() == 0
    with pytest.raises(nv.NvshmemError) as err:
        nv.collect()
    assert err.value.kind == "NotInitialized"
    assert "collect" in nv.__all__ and "pending_releases" in nv.__all__
