"""The one bitmask format: bit t % 32 of word t // 32 set = token t allowed (xgrammar's and
llguidance's layout). ``bitmask_to_bool`` unpacks it with numpy on CPU and with tensor ops
elsewhere; both must be the definition, for any vocabulary size, strided rows and the sign bit."""

from __future__ import annotations

import numpy as np
import torch

from trellis.mask import allocate_bitmask, allowed_ids, apply_bitmask_, bitmask_to_bool, bool_to_bitmask


def _definition(m: torch.Tensor, v: int) -> torch.Tensor:
    t = torch.arange(v)
    words = m[:, t // 32].to(torch.int64) & 0xFFFFFFFF
    return ((words >> (t % 32)) & 1).bool()


def test_bitmask_to_bool_is_the_definition() -> None:
    g = torch.Generator().manual_seed(0)
    for rows, v in [(1, 262144), (3, 1000), (2, 33), (1, 31), (4, 64)]:
        m = torch.randint(-2**31, 2**31 - 1, (rows, (v + 31) // 32), dtype=torch.int32, generator=g)
        m[0, 0] = -(1 << 31)  # only the sign bit: token 31
        assert torch.equal(bitmask_to_bool(m, v), _definition(m, v))
        wide = torch.randint(-2**31, 2**31 - 1, (rows, 2 * m.shape[1]), dtype=torch.int32, generator=g)
        assert torch.equal(bitmask_to_bool(wide[:, ::2], v), _definition(wide[:, ::2].contiguous(), v))
        allowed = _definition(m, v)
        assert torch.equal(bool_to_bitmask(allowed), m if v % 32 == 0 else bool_to_bitmask(allowed))
        assert allowed_ids(m[0], v) == torch.nonzero(allowed[0]).flatten().tolist()


def test_apply_bitmask_sets_exactly_the_disallowed_to_minus_inf() -> None:
    v = 1000
    m = allocate_bitmask(2, v)
    m[0, 3] = 0  # tokens 96..127 disallowed in row 0
    m[1, 0] = 1  # only token 0 of the first word in row 1
    logits = torch.zeros(2, 1024 + 7)  # wider than the mask's 32 words: the extra columns are disallowed
    apply_bitmask_(logits, m)
    bad = torch.isinf(logits)
    assert bad[0, 96:128].all() and not bad[0, :96].any() and not bad[0, 128:1024].any() and bad[:, 1024:].all()
    assert not bad[1, 0] and bad[1, 1:32].all() and not bad[1, 32:v].any()


def test_set_bit_ids_equal_the_unpacked_rows():
    from trellis.mask import allowed_ids, bool_to_bitmask, set_bit_ids

    gen = torch.Generator().manual_seed(0)
    for v, p in ((97, 0.3), (1000, 0.01), (262144, 1e-4), (262144, 0.0), (70, 1.0)):
        ok = torch.rand(v, generator=gen) < p
        bits = bool_to_bitmask(ok)[0]
        assert set_bit_ids(bits, v).tolist() == allowed_ids(bits, v) == ok.nonzero().flatten().tolist()
    bits = torch.full((4,), -1, dtype=torch.int32)  # every bit set, also past the vocabulary's end
    assert set_bit_ids(bits, 100).tolist() == list(range(100))


def test_few_set_bit_ids_lists_a_sparse_row_and_declines_a_dense_one():
    from trellis.mask import bits_at, few_set_bit_ids, set_bit_ids

    g = torch.Generator().manual_seed(7)
    for allowed_count in (0, 1, 5, 40, 41, 300):
        allowed = torch.zeros(1000, dtype=torch.bool)
        allowed[torch.randperm(1000, generator=g)[:allowed_count]] = True
        row = bool_to_bitmask(allowed)[0]
        got = few_set_bit_ids(row, 1000, 40)
        want = set_bit_ids(row, 1000)
        assert want.tolist() == allowed.nonzero().flatten().tolist()
        assert (got is None) == (allowed_count > 40)
        if got is not None:
            assert torch.equal(got, want)
        ids = torch.arange(1000)
        assert torch.equal(bits_at(row, ids), allowed)


def test_write_row_matches_torch_copy_on_every_layout():
    from trellis.mask import write_row

    rng = np.random.default_rng(3)
    row = rng.integers(-2**31, 2**31 - 1, size=40, dtype=np.int64).astype(np.int32)
    batch = allocate_bitmask(3, 40 * 32)
    write_row(batch[1], row)  # a contiguous row of a batch: the numpy path
    assert torch.equal(batch[1], torch.from_numpy(row)) and (batch[[0, 2]] == -1).all()
    strided = torch.zeros(80, dtype=torch.int32)[::2]  # a strided view: written in place too
    write_row(strided, row)
    assert torch.equal(strided, torch.from_numpy(row))
    wide = torch.zeros(40, dtype=torch.int64)  # another dtype: torch's copy (it casts)
    write_row(wide, row)
    assert torch.equal(wide, torch.from_numpy(row).long())


def test_write_row_reuses_a_view_only_for_the_same_memory_and_layout():
    """``write_row`` keeps the numpy view of the last CPU row (mask.py): rows of one bitmask, a new
    bitmask, a strided alias and a float alias of the same memory each get their own bytes."""
    from trellis.mask import write_row

    rng = np.random.default_rng(4)
    rows = rng.integers(-2**31, 2**31 - 1, size=(6, 40), dtype=np.int64).astype(np.int32)
    batch = allocate_bitmask(3, 40 * 32)
    for i in (0, 1, 1, 2, 0):  # a new tensor object per call, as callers pass ``bitmask[i]``
        write_row(batch[i], rows[i])
        assert torch.equal(batch[i], torch.from_numpy(rows[i]))
    assert torch.equal(batch, torch.from_numpy(rows[:3]))
    del batch
    fresh = allocate_bitmask(3, 40 * 32)  # new memory: written, not the old view
    write_row(fresh[0], rows[3])
    write_row(fresh[0], rows[4])
    assert torch.equal(fresh[0], torch.from_numpy(rows[4])) and (fresh[1:] == -1).all()
    flat = torch.zeros(80, dtype=torch.int32)
    write_row(flat[:40], rows[5])
    write_row(flat[::2], rows[3])  # the same data_ptr, another stride: its own view
    assert torch.equal(flat[::2], torch.from_numpy(rows[3]))
    assert torch.equal(flat[1:40:2], torch.from_numpy(rows[5][1::2]))
    as_float = flat[:40].view(torch.float32)  # the same memory and shape, another dtype: torch's cast
    write_row(as_float, rows[0])
    assert torch.equal(as_float, torch.from_numpy(rows[0]).float())
