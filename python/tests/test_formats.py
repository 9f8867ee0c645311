# SPDX-License-Identifier: Apache-2.0
"""The torch ops with the MXFP8 (528 B), NVFP4 (288 B) and V3.2 (656 B) records, as vLLM
selects them (a uint8 cache whose last dim is the record size) and through the keyword
``cache_layout``.

The records are decoded and compared with the float64 rotation of the latent within each
format's rounding (the C++ device tier checks every byte against its float64 reference);
NVFP4's two byte orders hold the same bytes; the fused op writes what the two ops write;
bytes outside the records stay poisoned; V3.2's NoPE bytes and scales are checked bit for bit
(their rule is exact); unknown names, V3.2 at ratio > 1 and in the fused op are refused.
Skipped without torch, the compiled ops or a CUDA device.
"""
import pytest

try:
    import torch
except ImportError:
    torch = None

import kvcompress as kvt

D, P = 512, 64
N = D - P
POISON = 0xCD
DEV = "cuda"
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


@pytest.fixture(scope="module", autouse=True)
def ops():
    pytest.importorskip("torch")
    if not kvt.available():
        pytest.skip(str(kvt.load_error()))
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return kvt


def cos_sin_table(max_pos):
    p = torch.arange(max_pos, dtype=torch.float64)[:, None]
    inv = 10000.0 ** (-2.0 * torch.arange(P // 2, dtype=torch.float64) / P)
    return torch.cat([(p * inv).cos(), (p * inv).sin()], 1).float()


def rotated(latent, group_pos, cs):
    """float64 rows: NoPE as stored, RoPE (the last 64 dims) rotated GPT-J style at each row's
    group position."""
    x = latent.cpu().double()
    n = x.shape[1] - P
    c, s = cs[group_pos, : P // 2].double(), cs[group_pos, P // 2:].double()
    e, o = x[:, n::2].clone(), x[:, n + 1::2].clone()
    x[:, n::2] = e * c - o * s
    x[:, n + 1::2] = o * c + e * s
    return x


def e4m3_decode(codes):
    return codes.view(torch.float8_e4m3fn).double()


def e2m1_decode(nibbles):
    table = torch.tensor(E2M1, dtype=torch.float64)
    mag = table[(nibbles & 7).long()]
    return torch.where((nibbles & 8) != 0, -mag, mag)


class Paged:
    """A poisoned uint8 cache of `record` bytes per token, pages padded as vLLM pads them
    (ceil(B * record / 512) * 512), or rows padded to `row_stride` bytes."""

    def __init__(self, record, pages=5, block=16, row_stride=None):
        self.record, self.pages, self.block = record, pages, block
        if row_stride is None:
            self.page_bytes = (block * record + 511) // 512 * 512
            self.storage = torch.full((pages, self.page_bytes), POISON, dtype=torch.uint8, device=DEV)
            self.tensor = self.storage[:, : block * record].unflatten(1, (block, record))
        else:
            self.row_stride = row_stride
            self.storage = torch.full((pages, block, row_stride), POISON, dtype=torch.uint8, device=DEV)
            self.tensor = self.storage[:, :, :record]

    def clone(self):
        c = Paged.__new__(Paged)
        c.__dict__.update(self.__dict__)
        c.storage = self.storage.clone()
        c.tensor = c.storage.as_strided(self.tensor.shape, self.tensor.stride())
        return c

    def page(self, p):
        return self.storage[p].reshape(-1).cpu()


def inputs(seed, T=40, ratio=2, pages=5, block=16, head_dim=D):
    gen = torch.Generator().manual_seed(seed)
    latent = (torch.randn(T, head_dim, generator=gen, dtype=torch.float64) *
              torch.exp2(torch.randint(-12, 8, (T, head_dim // 16), generator=gen).double())
              .repeat_interleave(16, 1))
    latent = latent.to(torch.bfloat16)
    positions = torch.randint(0, 1000, (T,), generator=gen) // ratio * ratio + ratio - 1
    slots = torch.randperm(pages * block, generator=gen)[:T].to(torch.int64)
    slots[5] = -1
    return latent, positions, slots


def run_insert(cache, latent, positions, slots, ratio, cs, **kw):
    kvt.rope_quant_insert(latent.to(DEV), positions.to(DEV), cs.to(DEV), cache.tensor, slots.to(DEV),
                          ratio, **kw)
    torch.cuda.synchronize()


def mxfp8_records(cache, slots):
    """(values [T, 512] float64 decoded, scale codes [T, 16]) of each slot's record."""
    out, scales = [], []
    for s in slots.tolist():
        page, row = divmod(s, cache.block)
        b = cache.page(page)
        v = b[row * 512:(row + 1) * 512]
        sc = b[cache.block * 512 + row * 16: cache.block * 512 + (row + 1) * 16]
        out.append(e4m3_decode(v) * torch.exp2(sc.double() - 127).repeat_interleave(32))
        scales.append(sc)
    return torch.stack(out), torch.stack(scales)


def nvfp4_bytes(cache, slots, rows):
    """(packed [T, 256], scales [T, 32]) uint8 of each slot's record."""
    packed, scales = [], []
    for s in slots.tolist():
        page, row = divmod(s, cache.block)
        if rows:
            r = cache.storage[page, row, :288].cpu()
            packed.append(r[:256])
            scales.append(r[256:288])
        else:
            b = cache.page(page)
            packed.append(b[row * 256:(row + 1) * 256])
            scales.append(b[cache.block * 256 + row * 32: cache.block * 256 + (row + 1) * 32])
    return torch.stack(packed), torch.stack(scales)


def nvfp4_decode(packed, scales):
    vals = torch.empty(packed.shape[0], 512, dtype=torch.float64)
    vals[:, 0::2] = e2m1_decode(packed & 0xF)
    vals[:, 1::2] = e2m1_decode(packed >> 4)
    return vals * e4m3_decode(scales).repeat_interleave(16, 1)


def written(positions, slots, ratio):
    keep = (slots >= 0) & ((positions + 1) % ratio == 0)
    return slots[keep], positions[keep], keep


@pytest.mark.parametrize("ratio", [1, 2, 4])
@pytest.mark.parametrize("selected", ["last dim", "keyword"])
def test_mxfp8_records(ratio, selected):
    latent, positions, slots = inputs(10 + ratio, ratio=ratio)
    cs = cos_sin_table(1024)
    cache = Paged(528)
    run_insert(cache, latent, positions, slots, ratio, cs,
               **({} if selected == "last dim" else {"cache_layout": "mxfp8"}))
    s, pos, keep = written(positions, slots, ratio)
    want = rotated(latent[keep], pos // ratio * ratio, cs)
    got, scale_codes = mxfp8_records(cache, s)
    tiles = want.abs().view(-1, 16, 32).amax(2)
    e = torch.ceil(torch.log2(torch.clamp(tiles.float(), min=1e-4) * (1.0 / 448.0))).double()
    # The scale code of each tile within one of the exact exponent (log2 in float here).
    assert ((scale_codes.double() - 127 - e).abs() <= 1).all()
    step = torch.exp2(scale_codes.double() - 127).repeat_interleave(32, 1)
    err = (got - want).abs()
    assert (err <= torch.maximum(want.abs() * 2.0**-4, step * 2.0**-9) + want.abs() * 2.0**-20).all()
    # Nothing outside the written records changed.
    used = torch.zeros(cache.pages, cache.page_bytes, dtype=torch.bool)
    for t in s.tolist():
        page, row = divmod(t, cache.block)
        used[page, row * 512:(row + 1) * 512] = True
        used[page, cache.block * 512 + row * 16: cache.block * 512 + (row + 1) * 16] = True
    after = cache.storage.cpu()
    assert (after[~used] == POISON).all()


@pytest.mark.parametrize("ratio", [1, 2])
def test_nvfp4_both_byte_orders(ratio):
    latent, positions, slots = inputs(20 + ratio, ratio=ratio)
    cs = cos_sin_table(1024)
    paged = Paged(288)
    rows = Paged(288, row_stride=320)
    run_insert(paged, latent, positions, slots, ratio, cs)  # 288: page-segregated, as vLLM
    run_insert(rows, latent, positions, slots, ratio, cs, cache_layout="nvfp4_rows")
    s, pos, keep = written(positions, slots, ratio)
    p1, s1 = nvfp4_bytes(paged, s, rows=False)
    p2, s2 = nvfp4_bytes(rows, s, rows=True)
    assert torch.equal(p1, p2) and torch.equal(s1, s2), "the two byte orders hold different bytes"
    want = rotated(latent[keep], pos // ratio * ratio, cs)
    got = nvfp4_decode(p1, s1)
    scale = e4m3_decode(s1).repeat_interleave(16, 1)
    # Each value is within half an e2m1 step of want / scale saturated at +-6 (a scale rounded
    # down, e.g. among e4m3's subnormals, saturates the tile's largest values), the step being
    # 0.5 below 2, 1 below 4 and 2 up to 6; the slack covers fp32 against float64 rotation.
    q = (want / scale).clamp(-6.0, 6.0)
    half_step = torch.where(q.abs() < 2, 0.25, torch.where(q.abs() < 4, 0.5, 1.0))
    assert ((got - q * scale).abs() <= (half_step + q.abs() * 2.0**-18) * scale).all()
    amax = want.abs().view(-1, 32, 16).amax(2)
    assert ((e4m3_decode(s1) - (amax / 6).clamp(2.0**-9, 448)).abs() <= (amax / 6) * 2.0**-4 + 2.0**-10).all()
    # Row padding and unused rows untouched.
    used = torch.zeros(rows.storage.shape, dtype=torch.bool)
    for t in s.tolist():
        page, row = divmod(t, rows.block)
        used[page, row, :288] = True
    assert (rows.storage.cpu()[~used] == POISON).all()


@pytest.mark.parametrize("layout,record,row_stride", [("mxfp8", 528, None), ("nvfp4", 288, None),
                                                      ("nvfp4_rows", 288, 304)])
def test_fused_equals_two_ops(layout, record, row_stride):
    from test_ops import make_batch, run_compress, REQUESTS  # noqa: the same batches as test_ops
    gen = torch.Generator().manual_seed(record)
    ratio = 2
    b = make_batch(gen, ratio, REQUESTS)
    cache = Paged(record, pages=8, row_stride=row_stride)
    fused = cache.clone()
    kv_slots = torch.randperm(cache.pages * cache.block, generator=gen)[: b.T].to(torch.int64)
    kv_slots[b.slots < 0] = -1
    cs = cos_sin_table(256).to(DEV)
    ring0 = None if b.ring_storage is None else b.ring_storage.clone()
    run_compress(b)
    kvt.rope_quant_insert(b.latent_out, b.positions.to(DEV), cs, cache.tensor, kv_slots.to(DEV), ratio,
                          cache_layout=layout)
    from test_ops import ring_view
    state = None if ring0 is None else ring_view(ring0, b.capacity)
    kvt.fused_compress_insert(b.kv_score, b.positions.to(DEV), state, b.slots.to(DEV), b.qsl.to(DEV),
                              b.req.to(DEV), b.weight, b.eps, ratio, cs, fused.tensor, kv_slots.to(DEV),
                              cache_layout=layout)
    torch.cuda.synchronize()
    assert torch.equal(cache.storage.cpu(), fused.storage.cpu()), f"{layout}: fused != Op A + Op B"
    assert (cache.storage.cpu() != POISON).any()


@pytest.mark.parametrize("selected", ["last dim", "keyword"])
def test_v32_records(selected):
    """DeepSeek V3.2's 656-byte rows at head dim 576, ratio 1: bytes 0-511 e4m3 NoPE in 4
    tiles of 128, 512-527 four fp32 power-of-two scales, 528-655 the rotated RoPE in bf16."""
    latent, positions, slots = inputs(31, head_dim=576, ratio=1)
    cs = cos_sin_table(1024)
    # "last dim": 656-byte rows packed in pages padded to 512 bytes, as vLLM allocates them;
    # "keyword": rows padded to 672 bytes, which only the keyword selects.
    cache = Paged(656) if selected == "last dim" else Paged(656, row_stride=672)
    run_insert(cache, latent, positions, slots, 1, cs,
               **({} if selected == "last dim" else {"cache_layout": "fp8_ds_mla_v32"}))
    s, pos, keep = written(positions, slots, 1)
    recs = []
    for t in s.tolist():
        page, row = divmod(t, cache.block)
        recs.append(cache.page(page)[row * 656:(row + 1) * 656] if selected == "last dim"
                    else cache.storage[page, row, :656].cpu())
    recs = torch.stack(recs)
    nope = latent[keep, :512].float()
    amax = nope.abs().view(-1, 4, 128).amax(2)
    # e = ceil(log2(max(amax / 448, 1e-4))) on fp32 (IEEE division), exactly, through frexp.
    q = torch.clamp(amax / torch.tensor(448.0), min=torch.tensor(1e-4, dtype=torch.float32))
    m, ex = torch.frexp(q)
    e = torch.where(m == 0.5, ex - 1, ex)
    want_scales = torch.exp2(e.double()).float()  # exact: integer exponents
    got_scales = recs[:, 512:528].contiguous().view(torch.float32)
    assert torch.equal(got_scales, want_scales)
    values = (nope * torch.exp2(-e.double()).float().repeat_interleave(128, 1)).clamp(-448, 448)
    assert torch.equal(recs[:, :512], values.to(torch.float8_e4m3fn).view(torch.uint8))
    rope = recs[:, 528:656].contiguous().view(torch.bfloat16).double()
    want = rotated(latent[keep], pos, cs)[:, 512:]
    x = latent[keep, 512:].double().abs()
    pair = (x[:, 0::2] + x[:, 1::2]).repeat_interleave(2, 1)
    assert ((rope - want).abs() <= want.abs() * 2.0**-7 + pair * 2.0**-20).all()
    # Nothing but the written records changed (row padding and unused rows poisoned).
    if selected == "keyword":
        used = torch.zeros(cache.storage.shape, dtype=torch.bool)
        for t in s.tolist():
            page, row = divmod(t, cache.block)
            used[page, row, :656] = True
        assert (cache.storage.cpu()[~used] == POISON).all()


def test_refused_layouts():
    latent, positions, slots = inputs(3)
    cs = cos_sin_table(1024)
    cache = Paged(288)
    before = cache.storage.clone()
    v32 = Paged(656)
    v32_before = v32.storage.clone()
    wide, _, _ = inputs(3, head_dim=576)
    with pytest.raises(ValueError, match="fp8_ds_mla_v32 .* for compress_ratio 1, got 2"):
        run_insert(v32, wide, positions, slots, 2, cs)
    with pytest.raises(ValueError, match=r"latent has shape \[40, 512\] but kv_cache .* head dim 576"):
        run_insert(v32, latent, positions, slots, 1, cs)
    from test_ops import make_batch, REQUESTS  # noqa: the same batches as test_ops
    b = make_batch(torch.Generator().manual_seed(5), 1, REQUESTS)
    with pytest.raises(ValueError, match="fp8_ds_mla_v32 .* is written by rope_quant_insert only"):
        kvt.fused_compress_insert(b.kv_score, b.positions.to(DEV), None, b.slots.to(DEV),
                                  b.qsl.to(DEV), b.req.to(DEV), b.weight, b.eps, 1,
                                  cs.to(DEV), v32.tensor, b.slots.to(DEV))
    with pytest.raises(ValueError, match="unknown cache_layout 'nvfp8'"):
        run_insert(cache, latent, positions, slots, 2, cs, cache_layout="nvfp8")
    with pytest.raises(ValueError, match="mxfp8 keeps 528 bytes"):
        run_insert(cache, latent, positions, slots, 2, cs, cache_layout="mxfp8")
    odd = Paged(300)
    with pytest.raises(ValueError, match="528 \\(mxfp8\\), 288 \\(nvfp4\\) or 656"):
        run_insert(odd, latent, positions, slots, 2, cs)
    torch.cuda.synchronize()
    assert torch.equal(cache.storage, before)
    assert torch.equal(v32.storage, v32_before)
