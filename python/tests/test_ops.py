# SPDX-License-Identifier: Apache-2.0
"""The three ops against a pure-PyTorch float64 reference, on the GPU (moved here from
examples/05_torch_op), plus vLLM's size contract (padded calls) and argument errors.

Skipped without torch, without the compiled ops or without a CUDA device.

    python3 -m pytest python/tests -q        # from the repository root, package installed
"""
import zlib

import pytest

try:
    import torch
except ImportError:  # the `ops` fixture skips every test
    torch = None

import kvcompress as kvt

D, P = 512, 64
N = D - P
TILE = 64
FP8_MAX = 448.0
LATENT_POISON = -23131  # int16 bits 0xA5A5: unwritten latent rows keep them
CACHE_POISON = 0xCD
ARG_ERRORS = (TypeError, ValueError, RuntimeError)
DEV = "cuda"


@pytest.fixture(scope="module", autouse=True)
def ops():
    # Skipped per test (not at module level) so that a run without torch or without a GPU
    # reports "N skipped" and exits 0, rather than pytest's 5 for "no tests collected".
    pytest.importorskip("torch")
    if not kvt.available():
        pytest.skip(str(kvt.load_error()))
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return kvt


def dtype_of(name):
    return getattr(torch, name)


# ---------------------------------------------------------------------------------------------
# Exact float helpers (float64 on the CPU)


def pow2(k):
    """Exact 2**k as float64 for an integer tensor k in [-1022, 1023] (built from the bits)."""
    return ((k.to(torch.int64) + 1023) << 52).view(torch.float64)


def floor_log2(a):
    """floor(log2(a)) for finite a > 0 (float64): frexp gives a = m * 2**e, m in [0.5, 1)."""
    _, e = torch.frexp(a)
    return e.to(torch.int64) - 1


def bf16_ulp(x):
    """Spacing of bf16 numbers in the binade of |x| (2**-133 below the smallest normal)."""
    a = x.abs().double()
    safe = torch.where(a > 0, a, torch.ones_like(a))
    ulp = pow2(floor_log2(safe) - 7)
    return torch.where(a < 2.0**-126, torch.full_like(a, 2.0**-133), ulp)


def e4m3_rne(v):
    """Round float64 values already clamped to [-448, 448] to e4m3 (RNE); returns uint8 codes."""
    v = v.double()
    a = v.abs()
    safe = torch.where(a > 0, a, torch.ones_like(a))
    ulp = torch.where(a >= 2.0**-6, pow2(floor_log2(safe) - 3), torch.full_like(a, 2.0**-9))
    r = torch.round(v / ulp) * ulp  # torch.round: half to even; v / ulp is exact
    r = r.clamp(-FP8_MAX, FP8_MAX)
    # r is exactly representable now, so the conversion does not round.
    return r.float().to(torch.float8_e4m3fn).view(torch.uint8)


def e4m3_ordinal(codes):
    """Signed ordinal of e4m3 codes (adjacent values differ by 1; +0 and -0 are both 0)."""
    c = codes.to(torch.int64)
    mag = c & 0x7F
    return torch.where((c & 0x80) != 0, -mag, mag)


def bf16_bits(t):
    return t.contiguous().view(torch.int16)


# ---------------------------------------------------------------------------------------------
# Batches (contract §1 conventions: requests packed in order, trailing padding with slot -1)


class Batch:
    pass


def make_batch(gen, ratio, requests, dtype=None, capacity=8, padding=2,
               kv_row_pad=0, ring_page_pad=16, latent_row_pad=0, eps=1e-6):
    """requests: list of (chunk_len, start_position). Everything on the GPU plus CPU copies."""
    b = Batch()
    dtype = dtype or torch.float32
    R, C = ratio, capacity
    b.ratio, b.capacity, b.eps, b.dtype = R, C, eps, dtype
    num_reqs = len(requests)
    blocks = torch.randperm(num_reqs + 1, generator=gen)[:num_reqs].tolist()  # one block spare
    positions, slots, req, qsl = [], [], [], [0]
    for r, (n, start) in enumerate(requests):
        for i in range(n):
            p = start + i
            positions.append(p)
            slots.append(blocks[r] * C + p % C)
            req.append(r)
        qsl.append(len(positions))
    for _ in range(padding):
        g = int(torch.randint(0, 50, (1,), generator=gen))
        positions.append(g * R + R - 1)  # would close a group if it were a real token
        slots.append(-1)
        req.append(max(num_reqs - 1, 0))
    T = len(positions)
    b.T = T
    b.positions = torch.tensor(positions, dtype=torch.int64)
    b.slots = torch.tensor(slots, dtype=torch.int64)
    b.req = torch.tensor(req, dtype=torch.int32)
    b.qsl = torch.tensor(qsl, dtype=torch.int32)

    width = 2 * D if R > 1 else D
    kv = torch.rand(T, D, generator=gen, dtype=torch.float64) * 4 - 2
    score = torch.rand(T, D, generator=gen, dtype=torch.float64) * 8 - 4
    rows = torch.cat([kv, score], 1) if R > 1 else kv
    storage = torch.full((T, width + kv_row_pad), float("nan"), dtype=dtype)
    storage[:, :width] = rows.to(dtype)
    b.kv_score_cpu = storage[:, :width]
    b.kv_score = storage.to(DEV)[:, :width]

    b.weight_cpu = (torch.rand(D, generator=gen, dtype=torch.float64) + 0.5).to(torch.bfloat16)
    b.weight = b.weight_cpu.to(DEV)

    if R > 1:
        blocks_total = num_reqs + 1
        page = C * 2 * D + ring_page_pad
        ring_storage = torch.full((blocks_total, page), float("nan"), dtype=dtype)
        history = torch.rand(blocks_total, C * 2 * D, generator=gen, dtype=torch.float64) * 4 - 2
        ring_storage[:, : C * 2 * D] = history.to(dtype)  # rows of earlier calls
        b.ring_storage_cpu = ring_storage
        b.ring_storage = ring_storage.to(DEV)
        b.state_cache = b.ring_storage[:, : C * 2 * D].unflatten(1, (C, 2 * D))
    else:
        b.ring_storage_cpu = b.ring_storage = b.state_cache = None

    latent_storage = torch.full((T, D + latent_row_pad), LATENT_POISON, dtype=torch.int16)
    b.latent_storage = latent_storage.view(torch.bfloat16).to(DEV)
    b.latent_out = b.latent_storage[:, :D]
    return b


def ring_view(storage, C):
    return storage[:, : C * 2 * D].unflatten(1, (C, 2 * D))


def run_compress(b, pdl=True):
    kvt.fused_save_compress_norm(
        b.kv_score, b.positions.to(DEV), b.state_cache, b.slots.to(DEV),
        b.qsl.to(DEV) if b.ratio > 1 else None, b.req.to(DEV) if b.ratio > 1 else None,
        b.weight, b.eps, b.ratio, b.latent_out, pdl=pdl)
    torch.cuda.synchronize()


# ---------------------------------------------------------------------------------------------
# Op A reference (contract §1)


def ref_compress(b):
    """Returns ({t: (latent float64 [D], magnitude [D])}, expected ring storage or None)."""
    R, C = b.ratio, b.capacity
    kv = b.kv_score_cpu.double()
    ring_before = ring_view(b.ring_storage_cpu, C).double() if R > 1 else None
    weight = b.weight_cpu.double()
    eps = float(torch.tensor(b.eps, dtype=torch.float32))  # the kernel gets a float
    pos, slots, req, qsl = b.positions.tolist(), b.slots.tolist(), b.req.tolist(), b.qsl.tolist()
    want = {}
    for t in range(b.T):
        s, p = slots[t], pos[t]
        if s < 0 or (p + 1) % R != 0:
            continue
        if R == 1:
            pooled = kv[t, :D]
            pooled_abs = pooled.abs()
        else:
            start = pos[qsl[req[t]]]
            members = []
            for q in range(p - R + 1, p + 1):
                members.append(kv[t - (p - q)] if q >= start else ring_before[s // C, q % C])
            m = torch.stack(members)
            kvq, sc = m[:, :D], m[:, D:]
            w = torch.exp(sc - sc.max(0).values)
            pooled = (kvq * w).sum(0) / w.sum(0)
            pooled_abs = (kvq.abs() * w).sum(0) / w.sum(0)
        denom = torch.sqrt((pooled * pooled).sum() / D + eps)
        want[t] = (pooled / denom * weight, pooled_abs / denom * weight.abs())
    ring_after = None
    if R > 1:
        ring_after = b.ring_storage_cpu.clone()
        view = ring_view(ring_after, C)
        for r in range(len(qsl) - 1):
            first, end = qsl[r], qsl[r + 1]
            for t in range(end - min(end - first, C), end):
                if slots[t] >= 0:
                    view[slots[t] // C, slots[t] % C] = b.kv_score_cpu[t]
    return want, ring_after


def bits(t):
    t = t.contiguous()
    return t.view(torch.int32) if t.element_size() == 4 else t.view(torch.int16)


def check_compress(b, want, ring_after):
    latent = b.latent_out.cpu()
    got = latent.double()
    R = b.ratio
    for t in range(b.T):
        if t in want:
            exact, mag = want[t]
            tol = bf16_ulp(exact) + (2 * R + 16 + D / 32) * 2.0**-24 * mag
            err = (got[t] - exact).abs()
            bad = ~(err <= tol)
            assert not bad.any(), (
                f"token {t}: latent dim {int(bad.nonzero()[0])} is {float(got[t][bad][0])}, "
                f"float64 {float(exact[bad][0])} (tolerance {float(tol[bad][0])})")
        else:
            assert (bf16_bits(latent[t]) == LATENT_POISON).all(), f"token {t}: latent row written"
    if ring_after is not None:
        dev = b.ring_storage.cpu()
        assert torch.equal(bits(dev), bits(ring_after)), "ring (state_cache) differs"
    return len(want)


REQUESTS = [
    (9, 0),    # prefill chunk 1
    (12, 9),   # chunk starting at an odd position: its first group reads the ring
    (1, 21),   # decode
    (4, 33),   # speculative step starting at an odd position
    (20, 6),   # chunk longer than the ring (only its last C tokens are stored)
]


@pytest.mark.parametrize("ratio", [1, 2, 4])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_compress_matches_reference(ratio, dtype):
    gen = torch.Generator().manual_seed(100 * ratio + (dtype == "bfloat16"))
    dtype = dtype_of(dtype)
    b = make_batch(gen, ratio, REQUESTS, dtype=dtype)
    want, ring_after = ref_compress(b)
    run_compress(b)
    assert check_compress(b, want, ring_after) > 0


@pytest.mark.parametrize("eps", [1e-20, 1e-6])
def test_compress_padded_strides(eps):
    """Row strides from the tensors: kv_score, latent_out and state_cache pages padded."""
    gen = torch.Generator().manual_seed(7)
    b = make_batch(gen, 2, REQUESTS, kv_row_pad=64, ring_page_pad=16, latent_row_pad=64, eps=eps)
    assert b.kv_score.stride(0) == 2 * D + 64 and b.state_cache.stride(0) == 8 * 2 * D + 16
    want, ring_after = ref_compress(b)
    run_compress(b, pdl=False)  # the PDL launch (the default) is covered by the other tests
    check_compress(b, want, ring_after)
    # Padding columns of the latent storage keep their poison.
    assert (b.latent_storage.cpu()[:, D:].view(torch.int16) == LATENT_POISON).all()


def test_compress_int32_indices_and_empty():
    gen = torch.Generator().manual_seed(8)
    b = make_batch(gen, 2, REQUESTS)
    want, ring_after = ref_compress(b)
    kvt.fused_save_compress_norm(
        b.kv_score, b.positions.int().to(DEV), b.state_cache, b.slots.int().to(DEV),
        b.qsl.to(DEV), b.req.to(DEV), b.weight, b.eps, 2, b.latent_out)
    torch.cuda.synchronize()
    check_compress(b, want, ring_after)
    # T == 0 is a no-op.
    e = torch.empty(0, 2 * D, device=DEV)
    i = torch.empty(0, dtype=torch.int64, device=DEV)
    kvt.fused_save_compress_norm(e, i, b.state_cache, i, b.qsl.to(DEV),
                                 torch.empty(0, dtype=torch.int32, device=DEV), b.weight, 1e-6, 2,
                                 torch.empty(0, D, dtype=torch.bfloat16, device=DEV))


# ---------------------------------------------------------------------------------------------
# vLLM's size contract: num_tokens = slot_mapping.numel(), the other token tensors may be longer


def padded_tokens(b, extra):
    """b's token tensors with `extra` rows past num_tokens = b.T: kv_score rows NaN, positions
    that would close a group, latent rows poisoned. Returns (kv_score, positions, req, latent)."""
    R = b.ratio
    kv = torch.full((b.T + extra, b.kv_score.shape[1]), float("nan"), dtype=b.dtype, device=DEV)
    kv[: b.T] = b.kv_score
    pos = torch.cat([b.positions, torch.arange(extra, dtype=torch.int64) * R + R - 1])
    req = torch.cat([b.req, torch.zeros(extra, dtype=torch.int32)])
    latent = torch.full((b.T + extra, D), LATENT_POISON, dtype=torch.int16, device=DEV)
    return kv, pos.to(DEV), req.to(DEV), latent.view(torch.bfloat16)


@pytest.mark.parametrize("ratio", [1, 2, 4])
def test_compress_padded_call(ratio):
    """slot_mapping shorter than kv_score / positions / latent_out (a padded batch, as vLLM
    passes it): rows past it are not read as tokens and keep their poison."""
    gen = torch.Generator().manual_seed(40 + ratio)
    b = make_batch(gen, ratio, REQUESTS)
    want, ring_after = ref_compress(b)
    extra = 7
    kv, pos, req, latent = padded_tokens(b, extra)
    kvt.fused_save_compress_norm(kv, pos, b.state_cache, b.slots.to(DEV),
                                 b.qsl.to(DEV) if ratio > 1 else None,
                                 req if ratio > 1 else None, b.weight, b.eps, ratio, latent)
    torch.cuda.synchronize()
    b.latent_out = latent[: b.T]
    assert check_compress(b, want, ring_after) > 0
    assert (bf16_bits(latent[b.T:].cpu()) == LATENT_POISON).all(), "a row past num_tokens written"


def test_insert_and_fused_padded_call():
    gen = torch.Generator().manual_seed(45)
    b = make_batch(gen, 2, REQUESTS)
    extra = 5
    cache = Cache("fp8_ds_mla", pages=8)
    total = cache.pages * cache.block
    kv_slots = torch.randperm(total, generator=gen)[: b.T + extra].to(torch.int64)
    kv_slots[: b.T][b.slots < 0] = -1
    cos_sin = cos_sin_table(256, torch.float32)
    ring0 = b.ring_storage.clone()
    fused_cache = cache.clone()
    before = cache.bytes()
    kv, pos, req, latent = padded_tokens(b, extra)

    # Op A with padded tensors, then Op B with a latent holding rows past num_tokens (closing
    # positions, valid cache slots in kv_slots[T:] that a full-length call would write).
    kvt.fused_save_compress_norm(kv, pos, b.state_cache, b.slots.to(DEV), b.qsl.to(DEV), req,
                                 b.weight, b.eps, 2, latent)
    latent[b.T:] = random_latent(gen, extra).to(DEV)
    kvt.rope_quant_insert(latent, pos, cos_sin, cache.tensor, kv_slots[: b.T].to(DEV), 2)
    torch.cuda.synchronize()
    expected, tolerant, checks = ref_insert(cache, latent[: b.T], b.positions, kv_slots[: b.T],
                                            cos_sin, 2, before)
    assert check_insert(cache, expected, tolerant, checks) > 0

    # The fused op with the same padded tensors (kv_slot_mapping longer too): the same bytes.
    state_cache = ring_view(ring0, b.capacity)
    fused_latent = torch.full_like(latent.view(torch.int16), LATENT_POISON).view(torch.bfloat16)
    kvt.fused_compress_insert(kv, pos, state_cache, b.slots.to(DEV), b.qsl.to(DEV), req,
                              b.weight, b.eps, 2, cos_sin, fused_cache.tensor, kv_slots.to(DEV),
                              latent_out=fused_latent)
    torch.cuda.synchronize()
    assert torch.equal(fused_cache.bytes(), cache.bytes()), "fused cache != Op A + Op B"
    assert torch.equal(bf16_bits(fused_latent[: b.T].cpu()), bf16_bits(latent[: b.T].cpu()))
    assert (bf16_bits(fused_latent[b.T:].cpu()) == LATENT_POISON).all()
    assert torch.equal(bits(ring0.cpu()), bits(b.ring_storage.cpu()))


def test_zero_tokens_is_a_no_op():
    """slot_mapping empty, every other tensor full: nothing is read or written."""
    gen = torch.Generator().manual_seed(46)
    b = make_batch(gen, 2, REQUESTS)
    empty = torch.empty(0, dtype=torch.int64, device=DEV)
    kvt.fused_save_compress_norm(b.kv_score, b.positions.to(DEV), b.state_cache, empty,
                                 b.qsl.to(DEV), b.req.to(DEV), b.weight, b.eps, 2, b.latent_out)
    cache = Cache("bf16")
    before = cache.bytes()
    latent = random_latent(gen, b.T).to(DEV)
    cos_sin = cos_sin_table(256, torch.float32)
    kvt.rope_quant_insert(latent, b.positions.to(DEV), cos_sin, cache.tensor, empty, 2)
    kvt.fused_compress_insert(b.kv_score, b.positions.to(DEV), b.state_cache, empty,
                              b.qsl.to(DEV), b.req.to(DEV), b.weight, b.eps, 2, cos_sin,
                              cache.tensor, empty, latent_out=b.latent_out)
    torch.cuda.synchronize()
    assert (bf16_bits(b.latent_out.cpu()) == LATENT_POISON).all()
    assert torch.equal(bits(b.ring_storage.cpu()), bits(b.ring_storage_cpu))
    assert torch.equal(cache.bytes(), before)


# ---------------------------------------------------------------------------------------------
# Op B reference (contract §2)


def rotate(x, cs):
    """GPT-J rotation of dims N..D-1 (float64); returns (rotated [P], magnitude [P])."""
    c, s = cs[: P // 2], cs[P // 2:]
    e, o = x[N::2], x[N + 1::2]
    rot = torch.empty(P, dtype=torch.float64)
    rot[0::2] = e * c - o * s
    rot[1::2] = o * c + e * s
    mag = torch.empty(P, dtype=torch.float64)
    mag[0::2] = (e * c).abs() + (o * s).abs()
    mag[1::2] = (o * c).abs() + (e * s).abs()
    return rot, mag


def ue8m0_tiles(nope_f32):
    """fp8_ds_mla NoPE quantization: (value codes [448] uint8, scale codes [7] uint8)."""
    tiles = nope_f32.view(N // TILE, TILE)
    a = torch.maximum(tiles.abs().amax(1), torch.tensor(1e-4, dtype=torch.float32))
    v = a * torch.tensor(1.0 / 448.0, dtype=torch.float32)  # fp32 multiply
    m, e = torch.frexp(v)  # v = m * 2**e, m in [0.5, 1): ceil(log2 v) = e - (m == 0.5)
    e = e.to(torch.int64) - (m == 0.5).to(torch.int64)
    scaled = (tiles.double() * pow2(-e)[:, None]).clamp(-FP8_MAX, FP8_MAX)  # exact scaling
    codes = e4m3_rne(scaled).reshape(N)
    scales = (e + 127).clamp(0, 255).to(torch.uint8)
    return codes, scales


class Cache:
    """A cache tensor with poisoned, padded storage, and the byte map of its layout."""

    def __init__(self, kind, pages=6, block=16):
        self.kind, self.pages, self.block = kind, pages, block
        if kind == "fp8_ds_mla":
            self.page_bytes = (block * 584 + 575) // 576 * 576  # vLLM pads to a multiple of 576
            self.storage = torch.full((pages, self.page_bytes), CACHE_POISON, dtype=torch.uint8,
                                      device=DEV)
            self.tensor = self.storage[:, : block * 584].unflatten(1, (block, 584))
        else:
            # Rows padded to 576 elements, one spare row per page: strides come from the tensor.
            dtype = torch.bfloat16 if kind == "bf16" else torch.float8_e4m3fn
            raw = torch.full((pages, block + 1, D + 64), CACHE_POISON, dtype=torch.uint8)
            if kind == "bf16":
                raw = torch.full((pages, block + 1, 2 * (D + 64)), CACHE_POISON, dtype=torch.uint8)
            self.storage = raw.to(DEV).view(dtype)
            self.tensor = self.storage[:, :block, :D]
        self.scale = None
        if kind == "fp8":
            self.scale = torch.tensor([0.0125], dtype=torch.float32, device=DEV)

    def clone(self):
        c = Cache.__new__(Cache)
        c.__dict__.update(self.__dict__)
        c.storage = self.storage.clone()
        if self.kind == "fp8_ds_mla":
            c.tensor = c.storage[:, : self.block * 584].unflatten(1, (self.block, 584))
        else:
            c.tensor = c.storage[:, : self.block, :D]
        return c

    def bytes(self):
        return self.storage.cpu().contiguous().view(torch.uint8).reshape(self.pages, -1)


def ref_insert(cache, latent, positions, slots, cos_sin, ratio, before):
    """Expected cache bytes [pages, page bytes], a mask of bytes checked with a tolerance,
    and the tolerance checks: list of (page, byte offset, kind, rotated, magnitude)."""
    expected = before.clone()
    tolerant = torch.zeros_like(expected, dtype=torch.bool)
    checks = []
    B = cache.block
    lat = latent.cpu()
    cs_all = cos_sin.cpu().double()
    pos, slot = positions.tolist(), slots.tolist()
    if cache.kind == "fp8":
        inverse = torch.tensor(1.0, dtype=torch.float32) / cache.scale.cpu()[0]  # fp32
    for t in range(lat.shape[0]):
        p, s = pos[t], slot[t]
        if s < 0 or s >= cache.pages * B or (p + 1) % ratio != 0:
            continue
        g = (p // ratio) * ratio
        if g >= cs_all.shape[0]:
            continue
        page, row = divmod(s, B)
        x32 = lat[t].float()
        rot, mag = rotate(x32.double(), cs_all[g])
        if cache.kind == "fp8_ds_mla":
            codes, scales = ue8m0_tiles(x32[:N])
            v0 = row * 576
            expected[page, v0: v0 + N] = codes
            tolerant[page, v0 + N: v0 + 576] = True
            checks.append((page, v0 + N, "bf16", rot, mag))
            s0 = B * 576 + row * 8
            expected[page, s0: s0 + 7] = scales
            expected[page, s0 + 7] = 0
        elif cache.kind == "bf16":
            r0 = row * (D + 64) * 2
            expected[page, r0: r0 + 2 * N] = lat[t, :N].contiguous().view(torch.uint8)
            tolerant[page, r0 + 2 * N: r0 + 2 * D] = True
            checks.append((page, r0 + 2 * N, "bf16", rot, mag))
        else:
            r0 = row * (D + 64)
            v = x32[:N] * inverse  # fp32 multiply by the fp32 reciprocal
            expected[page, r0: r0 + N] = e4m3_rne(v.double().clamp(-FP8_MAX, FP8_MAX))
            tolerant[page, r0 + N: r0 + D] = True
            checks.append((page, r0 + N, "fp8", rot, inverse))
    return expected, tolerant, checks


def check_insert(cache, expected, tolerant, checks):
    got = cache.bytes()
    diff = (got != expected) & ~tolerant
    if diff.any():
        page, off = (int(i) for i in diff.nonzero()[0])
        pytest.fail(f"{cache.kind}: cache byte {off} of page {page} is {int(got[page, off])}, "
                    f"expected {int(expected[page, off])}")
    for page, off, kind, rot, extra in checks:
        if kind == "bf16":
            vals = got[page, off: off + 2 * P].view(torch.bfloat16).double()
            tol = bf16_ulp(rot) + 4 * 2.0**-24 * extra
            bad = ~((vals - rot).abs() <= tol)
            assert not bad.any(), f"{cache.kind}: RoPE value {vals[bad][0]} vs float64 {rot[bad][0]}"
        else:
            y = rot.float().bfloat16().float()
            want = e4m3_rne((y * extra).double().clamp(-FP8_MAX, FP8_MAX))
            d = (e4m3_ordinal(got[page, off: off + P]) - e4m3_ordinal(want)).abs()
            assert (d <= 1).all(), f"fp8 rows: RoPE codes differ by {int(d.max())} e4m3 codes"
    return len(checks)


def cos_sin_table(max_pos, dtype):
    p = torch.arange(max_pos, dtype=torch.float64)[:, None]
    inv = 10000.0 ** (-2.0 * torch.arange(P // 2, dtype=torch.float64) / P)
    angle = p * inv
    return torch.cat([angle.cos(), angle.sin()], 1).to(dtype).to(DEV)


def random_latent(gen, T):
    x = torch.randn(T, D, generator=gen, dtype=torch.float64) * 1.5
    if T > 2:
        x[1, :N] *= 1e-6  # every NoPE tile below the 1e-4 floor
        # Tile maxima of 448 * 2**k: v = a * fp32(1/448) lands next to a power of two, where an
        # approximate log2 would pick the wrong exponent.
        for k in range(N // TILE):
            top = 448.0 * 2.0 ** (k - 10)
            x[2, k * TILE: (k + 1) * TILE].clamp_(-1.0, 1.0).mul_(0.5 * top)
            x[2, k * TILE + 5] = top
    return x.to(torch.bfloat16)


def insert_inputs(gen, cache, T, ratio, max_pos=4096):
    positions = torch.randint(0, max_pos - 8, (T,), generator=gen, dtype=torch.int64)
    positions[: T // 2] = positions[: T // 2] // ratio * ratio + ratio - 1  # half of them close
    total = cache.pages * cache.block
    slots = torch.randperm(total, generator=gen)[:T].to(torch.int64)
    slots[3] = -1                  # padding
    slots[4] = total + 5           # past the cache: skipped (num_pages from the tensor)
    positions[3] = positions[4] = ratio - 1
    return positions, slots


@pytest.mark.parametrize("kind", ["fp8_ds_mla", "bf16", "fp8"])
@pytest.mark.parametrize("ratio", [1, 2, 4])
@pytest.mark.parametrize("cs_dtype", ["float32", "bfloat16"])
def test_insert_matches_reference(kind, ratio, cs_dtype):
    gen = torch.Generator().manual_seed(zlib.crc32(f"{kind}/{ratio}/{cs_dtype}".encode()))
    cs_dtype = dtype_of(cs_dtype)
    T = 48
    cache = Cache(kind)
    latent = random_latent(gen, T).to(DEV)
    positions, slots = insert_inputs(gen, cache, T, ratio)
    cos_sin = cos_sin_table(4096, cs_dtype)
    before = cache.bytes()
    expected, tolerant, checks = ref_insert(cache, latent, positions, slots, cos_sin, ratio, before)
    kvt.rope_quant_insert(latent, positions.to(DEV), cos_sin, cache.tensor, slots.to(DEV), ratio,
                          fp8_scale=cache.scale, pdl=cs_dtype == torch.float32)  # both launches
    torch.cuda.synchronize()
    assert check_insert(cache, expected, tolerant, checks) > 0


# ---------------------------------------------------------------------------------------------
# Op A then Op B, and the fused op (contract §3: bit-identical to the two ops)


@pytest.mark.parametrize("kind", ["fp8_ds_mla", "bf16", "fp8"])
@pytest.mark.parametrize("ratio", [1, 2])
def test_two_ops_and_fused(kind, ratio):
    gen = torch.Generator().manual_seed(31 * ratio + len(kind))
    b = make_batch(gen, ratio, REQUESTS)
    cache = Cache(kind, pages=8)
    total = cache.pages * cache.block
    kv_slots = torch.randperm(total, generator=gen)[: b.T].to(torch.int64)
    kv_slots[b.slots < 0] = -1
    cos_sin = cos_sin_table(256, torch.float32)
    ring0 = None if b.ring_storage is None else b.ring_storage.clone()
    cache_fused = cache.clone()
    before = cache.bytes()

    # Op A then Op B.
    want, ring_after = ref_compress(b)
    run_compress(b)
    check_compress(b, want, ring_after)
    expected, tolerant, checks = ref_insert(cache, b.latent_out, b.positions, kv_slots, cos_sin,
                                            ratio, before)
    kvt.rope_quant_insert(b.latent_out, b.positions.to(DEV), cos_sin, cache.tensor,
                          kv_slots.to(DEV), ratio, fp8_scale=cache.scale)
    torch.cuda.synchronize()
    assert check_insert(cache, expected, tolerant, checks) > 0
    latent_two = b.latent_out.clone()
    ring_two = None if b.ring_storage is None else b.ring_storage.clone()

    # Fused, from the same starting state, with and without the latent, launched with and
    # without PDL (the default is on): the same bytes.
    for with_latent, pdl in ((True, True), (True, False), (False, True)):
        ring_storage = None if ring0 is None else ring0.clone()
        state_cache = None if ring_storage is None else ring_view(ring_storage, b.capacity)
        fused_cache = cache_fused.clone()
        latent = torch.full_like(b.latent_storage.view(torch.int16), LATENT_POISON)
        latent = latent.view(torch.bfloat16)[:, :D]
        kvt.fused_compress_insert(
            b.kv_score, b.positions.to(DEV), state_cache, b.slots.to(DEV),
            b.qsl.to(DEV) if ratio > 1 else None, b.req.to(DEV) if ratio > 1 else None,
            b.weight, b.eps, ratio, cos_sin, fused_cache.tensor, kv_slots.to(DEV),
            latent_out=latent if with_latent else None, fp8_scale=cache.scale, pdl=pdl)
        torch.cuda.synchronize()
        assert torch.equal(fused_cache.bytes(), cache.bytes()), "fused cache != Op A + Op B"
        if with_latent:
            assert torch.equal(bf16_bits(latent.cpu()), bf16_bits(latent_two.cpu()))
        else:
            assert (bf16_bits(latent.cpu()) == LATENT_POISON).all()
        if ring_two is not None:
            assert torch.equal(bits(ring_storage.cpu()), bits(ring_two.cpu()))


# ---------------------------------------------------------------------------------------------
# Argument errors: Python exceptions with a clear message, nothing written


@pytest.fixture
def small():
    gen = torch.Generator().manual_seed(5)
    b = make_batch(gen, 2, [(6, 3)], padding=0)
    return b


def compress_args(b, **override):
    args = dict(kv_score=b.kv_score, positions=b.positions.to(DEV), state_cache=b.state_cache,
                slot_mapping=b.slots.to(DEV), query_start_loc=b.qsl.to(DEV),
                token_to_req_indices=b.req.to(DEV), rms_norm_weight=b.weight,
                rms_norm_eps=1e-6, compress_ratio=2, latent_out=b.latent_out)
    args.update(override)
    return args


def assert_untouched(b):
    torch.cuda.synchronize()
    assert (b.latent_out.cpu().view(torch.int16) == LATENT_POISON).all()
    assert torch.equal(bits(b.ring_storage.cpu()), bits(b.ring_storage_cpu)), "ring written"


def padded_rows(t, pad):
    """A copy of 2-D `t` whose rows are `pad` elements apart more than their width."""
    storage = torch.zeros(t.shape[0], t.shape[1] + pad, dtype=t.dtype, device=t.device)
    storage[:, : t.shape[1]] = t
    return storage[:, : t.shape[1]]


@pytest.mark.parametrize("override, message", [
    (lambda b: dict(kv_score=b.kv_score.half()), r"kv_score must be float32 or bfloat16"),
    (lambda b: dict(kv_score=b.kv_score[:, :1000]), r"kv_score has shape \[6, 1000\]"),
    (lambda b: dict(positions=b.positions), r"positions must be a CUDA tensor"),
    (lambda b: dict(positions=b.positions.float().to(DEV)), r"positions must be int64 or int32"),
    (lambda b: dict(positions=b.positions[:5].to(DEV)),
     r"positions has 5 elements, fewer than num_tokens = slot_mapping.numel\(\) = 6"),
    (lambda b: dict(kv_score=b.kv_score[:5]), r"kv_score has shape \[5, 1024\], fewer rows"),
    (lambda b: dict(latent_out=b.latent_out[:4]), r"latent_out has shape \[4, 512\], fewer rows"),
    (lambda b: dict(token_to_req_indices=b.req[:3].to(DEV)), r"token_to_req_indices has 3"),
    (lambda b: dict(slot_mapping=b.slots.to(DEV)[None]), r"slot_mapping must be 1-D"),
    (lambda b: dict(slot_mapping=b.slots.float().to(DEV)), r"slot_mapping must be int64 or int32"),
    (lambda b: dict(positions=b.positions.to(DEV).repeat_interleave(2)[::2]),
     r"positions must be contiguous in its last dim, got strides \[2\]"),
    (lambda b: dict(rms_norm_weight=b.weight.cpu()), r"rms_norm_weight must be a CUDA tensor"),
    (lambda b: dict(rms_norm_eps=0.0), r"rms_norm_eps 0.0+ must be finite and > 0"),
    (lambda b: dict(kv_score=b.kv_score.cpu()), r"kv_score must be a CUDA tensor"),
    (lambda b: dict(kv_score=padded_rows(b.kv_score, 2)), r"kv_score row stride 1026"),
    (lambda b: dict(rms_norm_weight=b.weight.float()), r"rms_norm_weight must be"),
    (lambda b: dict(latent_out=b.latent_out.float()), r"latent_out must be"),
    (lambda b: dict(query_start_loc=b.qsl.long().to(DEV)), r"query_start_loc must be"),
    (lambda b: dict(state_cache=None), r"state_cache is required"),
    (lambda b: dict(state_cache=b.state_cache.double()), r"state_cache must have"),
    (lambda b: dict(kv_score=b.kv_score.t().contiguous().t()), r"contiguous in its last dim"),
    # Rejected by the library's validation: its Status message becomes the exception's.
    (lambda b: dict(compress_ratio=3), r"compress ratio 3 is not one of the compiled ratios"),
    (lambda b: dict(compress_ratio=4, kv_score=b.kv_score,
                    state_cache=b.state_cache[:, :2]), r"ring capacity 2 is smaller"),
])
def test_compress_bad_arguments(small, override, message):
    with pytest.raises(ARG_ERRORS, match=message):
        kvt.fused_save_compress_norm(**compress_args(small, **override(small)))
    assert_untouched(small)


def test_insert_bad_arguments(small):
    T = 6
    latent = torch.zeros(T, D, dtype=torch.bfloat16, device=DEV)
    pos = torch.arange(T, device=DEV)
    slots = torch.arange(T, device=DEV)
    cs = cos_sin_table(64, torch.float32)
    cache = Cache("fp8_ds_mla")
    fp8 = Cache("fp8")

    def call(**kw):
        args = dict(latent=latent, positions=pos, cos_sin_cache=cs, kv_cache=cache.tensor,
                    slot_mapping=slots, compress_ratio=2)
        args.update(kw)
        kvt.rope_quant_insert(**args)

    cases = [
        (dict(latent=latent.float()), r"latent must be"),
        (dict(latent=latent.cpu()), r"latent must be a CUDA tensor"),
        (dict(cos_sin_cache=cs.cpu()), r"cos_sin_cache must be a CUDA tensor"),
        (dict(cos_sin_cache=cs[:, :32]), r"cos_sin_cache has shape"),
        (dict(cos_sin_cache=cs.double()), r"cos_sin_cache must be float32 or bfloat16"),
        (dict(kv_cache=cache.storage[:, :16 * 576].unflatten(1, (16, 576))), r"584"),
        (dict(kv_cache=cache.tensor.float()), r"kv_cache dtype"),
        (dict(kv_cache=cache.tensor.cpu()), r"kv_cache must be a CUDA tensor"),
        (dict(kv_cache=fp8.tensor), r"fp8_scale .* is required"),
        (dict(kv_cache=fp8.tensor, fp8_scale=fp8.scale.double()), r"fp8_scale must be"),
        (dict(kv_cache=fp8.tensor, fp8_scale=fp8.scale.cpu()), r"fp8_scale must be a CUDA"),
        (dict(kv_cache=fp8.tensor[:, :, :256]), r"fp8_rows keeps 512 values per record"),
        (dict(slot_mapping=slots.int().float()), r"slot_mapping must be int64 or int32"),
        (dict(positions=pos[:4]), r"positions has 4 elements"),
        (dict(latent=latent[:4]), r"latent has shape \[4, 512\], fewer rows than num_tokens"),
        (dict(slot_mapping=slots.repeat_interleave(2)[::2]), r"slot_mapping must be contiguous"),
        (dict(slot_mapping=slots[None]), r"slot_mapping must be 1-D"),
        (dict(latent=latent.cpu(), positions=pos.cpu(), cos_sin_cache=cs.cpu(),
              kv_cache=cache.tensor.cpu(), slot_mapping=slots.cpu()),
         r"latent must be a CUDA tensor"),  # all on the CPU: the CPU registration says so
        (dict(kv_cache=cache.storage[:, : 16 * 584].unflatten(1, (8, 1168))[:, :, :584]),
         r"packed within a page"),
        (dict(compress_ratio=0), r"compress_ratio 0 must be >= 1"),
    ]
    before = cache.bytes()
    for kw, message in cases:
        with pytest.raises(ARG_ERRORS, match=message):
            call(**kw)
    torch.cuda.synchronize()
    assert torch.equal(cache.bytes(), before)


def test_fused_bad_arguments(small):
    cache = Cache("bf16")
    cs = cos_sin_table(64, torch.float32)
    slots = torch.arange(small.T, device=DEV)
    args = compress_args(small)
    del args["latent_out"]
    with pytest.raises(ARG_ERRORS, match=r"kv_slot_mapping must be a CUDA tensor"):
        kvt.fused_compress_insert(**args, cos_sin_cache=cs, kv_cache=cache.tensor,
                                  kv_slot_mapping=slots.cpu())
    with pytest.raises(ARG_ERRORS, match=r"latent_out has shape"):
        kvt.fused_compress_insert(**args, cos_sin_cache=cs, kv_cache=cache.tensor,
                                  kv_slot_mapping=slots, latent_out=small.latent_out[:, :256])
