"""The shortlist exit check (jtc.evaluation.shortlist): its factorisation, its check, its file and
its columns in the per-position scores."""

import numpy as np
import pytest
import torch
from torch import nn

from jtc.evaluation.exit_tables import shortlist_macs
from jtc.evaluation.shortlist import Factors, Shortlist, fit_factors, load_factors, save_factors
from jtc.files.io import CorruptFileError
from jtc.model.head import Head
from jtc.model.scoring import SHORTLIST_COLUMNS, final_reference, score

VOCAB, WIDTH = 300, 24


def make_head(seed=0, bias=True, softcap=None) -> Head:
    torch.manual_seed(seed)
    unembedding = nn.Linear(WIDTH, VOCAB, bias=bias)
    return Head(None, unembedding, softcap=softcap)


def low_rank_features(n, dims, seed=1) -> torch.Tensor:
    """Features that live near a `dims`-dimensional subspace, with a few large coordinates, as
    final states do."""
    g = torch.Generator().manual_seed(seed)
    basis = torch.randn(dims, WIDTH, generator=g) * torch.linspace(4, 0.5, dims)[:, None]
    return torch.randn(n, dims, generator=g) @ basis + 0.05 * torch.randn(n, WIDTH, generator=g)


def residual(weight, factors: Factors, x) -> float:
    """E‖W x − W B D x‖² over the rows of x."""
    down, basis = torch.tensor(factors.down), torch.tensor(factors.basis)
    approx = x @ down.T @ basis.T
    return float(((x - approx) @ weight.T).pow(2).sum(1).mean())


def test_full_rank_factors_reproduce_the_logits():
    head = make_head()
    x = low_rank_features(200, WIDTH)
    factors = fit_factors(head.weight, [x[:100], x[100:]], rank=WIDTH + 10)  # capped at w
    assert factors.rank == WIDTH
    check = Shortlist(head, factors, candidates=5)
    torch.testing.assert_close(check.approximate(x), head.logits(x), rtol=1e-4, atol=1e-4)


def test_the_fitted_factors_minimise_the_logit_error_on_such_features():
    head = make_head()
    x = low_rank_features(2000, 6)
    fitted = fit_factors(head.weight, [x], rank=4)
    # the plain factorisation: the top right singular vectors of W, blind to the features
    _, _, vh = torch.linalg.svd(head.weight, full_matrices=False)
    plain = Factors(down=vh[:4].numpy(), basis=vh[:4].T.numpy())
    g = torch.Generator().manual_seed(7)
    best = residual(head.weight, fitted, x)
    assert best < 0.5 * residual(head.weight, plain, x)
    for _ in range(5):  # and any other rank-4 projection does worse
        q, _ = torch.linalg.qr(torch.randn(WIDTH, 4, generator=g))
        other = Factors(down=q.T.numpy(), basis=q.numpy())
        assert best < residual(head.weight, other, x)


@pytest.mark.parametrize("softcap", [None, 2.0])
def test_with_every_token_a_candidate_the_check_is_the_full_check(softcap):
    head = make_head(softcap=softcap)
    x = low_rank_features(50, 5)
    check = Shortlist(head, fit_factors(head.weight, [x], rank=3), candidates=10_000)
    assert check.candidates == VOCAB
    prediction, first, second = check.check(x)
    probs = torch.softmax(head.logits(x), dim=1).topk(2, dim=1)
    torch.testing.assert_close(prediction, probs.indices[:, 0])
    torch.testing.assert_close(first, probs.values[:, 0])
    torch.testing.assert_close(second, probs.values[:, 1])


def test_the_check_computes_the_candidates_logits_as_read_from_the_whole_vocabulary():
    head = make_head(softcap=3.0)
    x = low_rank_features(80, 5)
    check = Shortlist(head, fit_factors(head.weight, [x], rank=3), candidates=8)
    alone = check.check(x)
    read = check.check(x, head.logits(x))
    for a, b in zip(alone, read, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    # its prediction is the best candidate, its probabilities the softmax over the candidates
    approx = check.approximate(x)
    candidates = approx.topk(8, dim=1).indices
    exact = head.logits(x).gather(1, candidates)
    best = torch.softmax(exact, 1).topk(2, dim=1)
    torch.testing.assert_close(alone[0], candidates.gather(1, best.indices[:, :1])[:, 0])
    torch.testing.assert_close(torch.stack(alone[1:], 1), best.values)


def test_the_cost_of_a_check_as_the_early_exit_tables_count_it():
    head = make_head()
    x = low_rank_features(30, 5)
    for rank, candidates in ((4, 16), (100, 1000)):
        check = Shortlist(head, fit_factors(head.weight, [x], rank), candidates)
        info = {"hidden_size": WIDTH, "vocab_size": VOCAB}
        assert check.macs() == shortlist_macs(info, rank, candidates)
    assert shortlist_macs(info, 4, 16) == 4 * WIDTH + VOCAB * 4 + 16 * WIDTH


def test_factors_file_round_trip_and_damage_named(tmp_path):
    head = make_head()
    factors = fit_factors(head.weight, [low_rank_features(40, 5)], rank=3)
    path = tmp_path / "shortlist.safetensors"
    save_factors(path, factors, {"model": "m"})
    read = load_factors(path)
    np.testing.assert_array_equal(read.down, factors.down)
    np.testing.assert_array_equal(read.basis, factors.basis)
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError, match="does not match its checksum"):
        load_factors(path)
    with pytest.raises(ValueError, match="no runner-up"):
        Shortlist(head, factors, candidates=1)
    other = Factors(down=np.zeros((3, WIDTH + 1), np.float32), basis=np.zeros((WIDTH + 1, 3)))
    with pytest.raises(ValueError, match=f"factors of width {WIDTH + 1} for a head of width"):
        Shortlist(head, other, candidates=4)


def test_scores_hold_the_shortlist_columns_where_decoding_has_a_check():
    head = make_head()
    final = low_rank_features(60, 5, seed=2).numpy()
    states = final + 0.5 * low_rank_features(60, 5, seed=3).numpy()
    reference = final_reference(head, final, k=10)
    gold = np.full(60, -1)
    plain = score(head, reference, states, gold)
    assert not set(SHORTLIST_COLUMNS) & set(plain)
    factors = fit_factors(head.weight, [torch.tensor(final)], rank=4)
    every = score(head, reference, states, gold, Shortlist(head, factors, VOCAB))
    # every token a candidate: the shortlist's columns are the full check's
    np.testing.assert_allclose(every["shortlist_top1_prob"], plain["top1_prob"], rtol=1e-5)
    np.testing.assert_allclose(every["shortlist_top2_prob"], plain["top2_prob"], rtol=1e-5)
    np.testing.assert_array_equal(every["shortlist_final_rank"], plain["final_rank"])
    few = score(head, reference, states, gold, Shortlist(head, factors, 3))
    for column in plain:  # the other columns do not depend on the check
        np.testing.assert_array_equal(few[column], plain[column])
    assert few["shortlist_final_rank"].dtype == np.int64
    # where the candidates hold the full top-1, the shortlist predicts it: the same rank
    check = Shortlist(head, factors, 3)
    x = torch.tensor(states)
    held = check.approximate(x).topk(3, 1).indices == torch.tensor(plain["top1_id"])[:, None]
    held = held.any(1).numpy()
    assert 0 < held.sum() < len(held)  # both cases occur
    np.testing.assert_array_equal(few["shortlist_final_rank"][held], plain["final_rank"][held])
