# SPDX-License-Identifier: Apache-2.0
"""torch.ops.kvcompress as PyTorch sees it: schemas, fake implementations, tracing and
functionalization (these run on a CPU-only machine with the package built), then on a GPU
torch.library.opcheck, torch.compile(fullgraph=True) equal to eager bit for bit, and CUDA
graph capture and replay with changed inputs.

    python3 -m pytest python/tests -q        # from the repository root, package installed
"""
import warnings

import pytest

torch = pytest.importorskip("torch")
import kvcompress as kvt  # noqa: E402

if not kvt.available():
    pytest.skip(str(kvt.load_error()), allow_module_level=True)

D = 512
OPS = ("fused_save_compress_norm", "rope_quant_insert", "fused_compress_insert")


def op(name):
    return getattr(torch.ops.kvcompress, name).default


def cuda_or_skip():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")


# ---------------------------------------------------------------------------------------------
# Without a GPU


def test_schemas_state_what_each_op_writes():
    written = {
        "fused_save_compress_norm": {"state_cache", "latent_out"},
        "rope_quant_insert": {"kv_cache"},
        "fused_compress_insert": {"state_cache", "kv_cache", "latent_out"},
    }
    for name in OPS:
        schema = op(name)._schema
        assert schema.is_mutable, name
        assert not schema.returns, name
        got = {a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write}
        assert got == written[name], name
        assert [a.name for a in schema.arguments][-1] == "pdl"
    assert "Tensor(a!)? state_cache" in str(op("fused_save_compress_norm")._schema)


def small_inputs(device="cpu", ratio=2, T=6, rows=None):
    """Shapes of a vLLM call (contents do not matter: nothing here runs a kernel)."""
    rows = rows or T
    width = 2 * D if ratio > 1 else D
    f32, i64, i32 = torch.float32, torch.int64, torch.int32
    return dict(
        kv_score=torch.zeros(rows, width, dtype=f32, device=device),
        positions=torch.arange(rows, dtype=i64, device=device),
        state_cache=torch.zeros(4, 8, 2 * D, dtype=f32, device=device) if ratio > 1 else None,
        slot_mapping=torch.arange(T, dtype=i64, device=device),
        query_start_loc=torch.tensor([0, T], dtype=i32, device=device),
        token_to_req_indices=torch.zeros(rows, dtype=i32, device=device),
        rms_norm_weight=torch.ones(D, dtype=torch.bfloat16, device=device),
        latent_out=torch.zeros(rows, D, dtype=torch.bfloat16, device=device),
        cos_sin_cache=torch.zeros(64, 64, dtype=f32, device=device),
        kv_cache=torch.zeros(4, 16, 584, dtype=torch.uint8, device=device),
        kv_slot_mapping=torch.arange(T, dtype=i64, device=device),
    )


def step(x, ratio=2):
    """Op A then Op B, as vLLM's compressor calls them."""
    kvt.fused_save_compress_norm(x["kv_score"], x["positions"], x["state_cache"],
                                 x["slot_mapping"], x["query_start_loc"],
                                 x["token_to_req_indices"], x["rms_norm_weight"], 1e-6, ratio,
                                 x["latent_out"])
    kvt.rope_quant_insert(x["latent_out"], x["positions"], x["cos_sin_cache"], x["kv_cache"],
                          x["kv_slot_mapping"], ratio)


def test_fake_tensor_mode_runs_the_fake_implementations():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        for ratio in (1, 2):
            x = small_inputs(ratio=ratio, rows=9)
            step(x, ratio)
            kvt.fused_compress_insert(
                x["kv_score"], x["positions"], x["state_cache"], x["slot_mapping"],
                x["query_start_loc"], x["token_to_req_indices"], x["rms_norm_weight"], 1e-6,
                ratio, x["cos_sin_cache"], x["kv_cache"], x["kv_slot_mapping"])


def test_export_functionalizes_both_ops():
    """torch.export + run_decompositions (the functional IR that torch.compile lowers): each
    op becomes an auto_functionalized node, ratio 1 (state_cache None) included."""
    for ratio in (1, 2):
        x = small_inputs(ratio=ratio)
        names = [n for n in x if x[n] is not None]

        class Step(torch.nn.Module):
            def forward(self, *args):
                step({**x, **dict(zip(names, args))}, ratio)

        ep = torch.export.export(Step(), tuple(x[n] for n in names)).run_decompositions()
        wrapped = [n.args[0] for n in ep.graph.nodes
                   if n.op == "call_function" and "auto_functionalized" in str(n.target)]
        assert wrapped == [op("fused_save_compress_norm"), op("rope_quant_insert")], ratio


def test_dynamo_traces_the_wrappers_fullgraph():
    """torch.compile(fullgraph=True) captures both ops in one graph (a backend that only
    records the graph: nothing runs, so no GPU is needed)."""
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return lambda *args: ()

    x = small_inputs()
    torch._dynamo.reset()
    torch.compile(step, fullgraph=True, backend=record)(x)
    assert len(graphs) == 1
    targets = [n.target for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert targets.count(op("fused_save_compress_norm")) + targets.count(
        torch.ops.kvcompress.fused_save_compress_norm) == 1
    assert op("rope_quant_insert") in targets or torch.ops.kvcompress.rope_quant_insert in targets


def test_cpu_tensors_raise_a_clear_error():
    x = small_inputs()
    with pytest.raises(ValueError, match=r"fused_save_compress_norm: kv_score must be a CUDA "
                                         r"tensor, got one on cpu"):
        step(x)
    with pytest.raises(ValueError, match=r"rope_quant_insert: latent must be a CUDA tensor"):
        kvt.rope_quant_insert(x["latent_out"], x["positions"], x["cos_sin_cache"], x["kv_cache"],
                              x["kv_slot_mapping"], 2)


@pytest.fixture
def stand_in_cpu_kernels():
    """CPU kernels that write (made-up values) into exactly the tensors the schemas mark as
    written, in place of the CUDA code: PyTorch's machinery (opcheck, torch.compile with
    inductor) then runs end to end without a GPU. The real CPU registration comes back after."""
    from torch.library import _scoped_library

    def op_a(kv_score, positions, state_cache, slot_mapping, query_start_loc,
             token_to_req_indices, rms_norm_weight, rms_norm_eps, compress_ratio, latent_out,
             pdl=True):
        T = slot_mapping.numel()
        latent_out[:T].copy_(kv_score[:T, :D] * (rms_norm_eps * 1e6))
        if compress_ratio > 1:
            state_cache[1, :2].copy_(kv_score[:2])

    def op_b(latent, positions, cos_sin_cache, kv_cache, slot_mapping, compress_ratio,
             fp8_scale=None, cache_layout=None, pdl=True):
        kv_cache[1, :3, :D].copy_(latent[:3].view(torch.uint8)[:, :D])

    def fused(kv_score, positions, state_cache, slot_mapping, query_start_loc,
              token_to_req_indices, rms_norm_weight, rms_norm_eps, compress_ratio,
              cos_sin_cache, kv_cache, kv_slot_mapping, latent_out=None, fp8_scale=None,
              cache_layout=None, pdl=True):
        kv_cache.add_(1)
        if latent_out is not None:
            latent_out.add_(1)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Overriding a previously registered kernel"
        with _scoped_library("kvcompress", "IMPL") as lib:
            lib.impl("fused_save_compress_norm", op_a, "CPU", allow_override=True)
            lib.impl("rope_quant_insert", op_b, "CPU", allow_override=True)
            lib.impl("fused_compress_insert", fused, "CPU", allow_override=True)
            yield
    with pytest.raises(ValueError, match=r"must be a CUDA tensor"):  # the real one is back
        step(small_inputs())


def padded_cpu_inputs(ratio):
    """small_inputs with vLLM's padded ring pages and cache page stride (views of a base)."""
    x = small_inputs(ratio=ratio, rows=9)
    x["kv_score"].copy_(torch.randn(x["kv_score"].shape, generator=torch.Generator().manual_seed(0)))
    if ratio > 1:
        x["state_cache"] = torch.zeros(4, 8 * 2 * D + 16)[:, : 8 * 2 * D].unflatten(1, (8, 2 * D))
    x["kv_cache"] = torch.zeros(4, 9792, dtype=torch.uint8)[:, : 16 * 584].unflatten(1, (16, 584))
    return x


def opcheck_all_ops(x, ratio):
    """torch.library.opcheck of the three ops on the batch `x` (same tensors either device)."""
    a_args = (x["kv_score"], x["positions"], x["state_cache"], x["slot_mapping"],
              x["query_start_loc"], x["token_to_req_indices"], x["rms_norm_weight"], 1e-6,
              ratio, x["latent_out"])
    torch.library.opcheck(op("fused_save_compress_norm"), a_args)
    torch.library.opcheck(op("rope_quant_insert"),
                          (x["latent_out"], x["positions"], x["cos_sin_cache"], x["kv_cache"],
                           x["kv_slot_mapping"], ratio))
    torch.library.opcheck(op("fused_compress_insert"),
                          a_args[:9] + (x["cos_sin_cache"], x["kv_cache"], x["kv_slot_mapping"]),
                          {"latent_out": x["latent_out"], "pdl": False})


@pytest.mark.parametrize("ratio", [1, 2])
def test_opcheck_with_stand_in_kernels(stand_in_cpu_kernels, ratio):
    x = padded_cpu_inputs(ratio)
    opcheck_all_ops(x, ratio)


@pytest.mark.parametrize("ratio", [1, 2])
def test_compile_with_stand_in_kernels_equals_eager(stand_in_cpu_kernels, ratio):
    """Inductor's functionalization and re-inplacing of both ops, with written arguments that
    are views into padded storage: the compiled step writes what the eager one does."""
    eager, compiled = padded_cpu_inputs(ratio), padded_cpu_inputs(ratio)
    step(eager, ratio)
    torch._dynamo.reset()
    torch.compile(step, fullgraph=True)(compiled, ratio)
    for k, v in eager.items():
        assert (v is None and compiled[k] is None) or torch.equal(v, compiled[k]), k
    assert eager["latent_out"].abs().sum() > 0 and eager["kv_cache"].sum() > 0


# ---------------------------------------------------------------------------------------------
# On a GPU


def gpu_batch(ratio, seed=3, extra_rows=0):
    """A real batch (test_ops.py's helpers) with vLLM-padded page strides, on the GPU."""
    import test_ops as t

    gen = torch.Generator().manual_seed(seed)
    b = t.make_batch(gen, ratio, t.REQUESTS)
    cache = t.Cache("fp8_ds_mla", pages=8)
    total = cache.pages * cache.block
    kv_slots = torch.randperm(total, generator=gen)[: b.T].to(torch.int64)
    kv_slots[b.slots < 0] = -1
    x = dict(kv_score=b.kv_score, positions=b.positions.to("cuda"), state_cache=b.state_cache,
             slot_mapping=b.slots.to("cuda"),
             query_start_loc=b.qsl.to("cuda") if ratio > 1 else None,
             token_to_req_indices=b.req.to("cuda") if ratio > 1 else None,
             rms_norm_weight=b.weight, latent_out=b.latent_out,
             cos_sin_cache=t.cos_sin_table(256, torch.float32), kv_cache=cache.tensor,
             kv_slot_mapping=kv_slots.to("cuda"))
    return x, b, cache


def snapshot(b, cache):
    ring = None if b.ring_storage is None else b.ring_storage.clone()
    return b.latent_storage.clone(), ring, cache.storage.clone()


def restore(b, cache, snap):
    b.latent_storage.copy_(snap[0])
    if snap[1] is not None:
        b.ring_storage.copy_(snap[1])
    cache.storage.copy_(snap[2])


def outputs(b, cache):
    ring = None if b.ring_storage is None else b.ring_storage.view(torch.int32).clone()
    return b.latent_storage.view(torch.int16).clone(), ring, cache.storage.view(torch.uint8).clone()


def assert_same(a, b):
    for u, v in zip(a, b):
        assert (u is None and v is None) or torch.equal(u, v)


@pytest.mark.parametrize("ratio", [1, 2])
def test_opcheck(ratio):
    cuda_or_skip()
    x, b, cache = gpu_batch(ratio)
    opcheck_all_ops(x, ratio)


@pytest.mark.parametrize("ratio", [1, 2])
def test_compile_fullgraph_equals_eager(ratio):
    cuda_or_skip()
    x, b, cache = gpu_batch(ratio, seed=11)
    snap = snapshot(b, cache)
    step(x, ratio)
    torch.cuda.synchronize()
    eager = outputs(b, cache)
    restore(b, cache, snap)
    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True)
    compiled(x, ratio)
    torch.cuda.synchronize()
    assert_same(outputs(b, cache), eager)


def test_cuda_graph_capture_and_replay_with_changed_inputs():
    cuda_or_skip()
    ratio = 2
    x, b, cache = gpu_batch(ratio, seed=12)
    snap = snapshot(b, cache)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up outside the capture
        step(x, ratio)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step(x, ratio)
    for seed in (21, 22):
        # New inputs copied into the captured tensors, outputs reset: replay == eager.
        gen = torch.Generator().manual_seed(seed)
        new_kv = (torch.rand(x["kv_score"].shape, generator=gen) * 4 - 2).to("cuda")
        new_weight = (torch.rand(D, generator=gen) + 0.5).to(torch.bfloat16).to("cuda")
        x["kv_score"].copy_(new_kv)
        x["rms_norm_weight"].copy_(new_weight)
        restore(b, cache, snap)
        step(x, ratio)
        torch.cuda.synchronize()
        eager = outputs(b, cache)
        restore(b, cache, snap)
        graph.replay()
        torch.cuda.synchronize()
        assert_same(outputs(b, cache), eager)
        assert not torch.equal(eager[0], snap[0].view(torch.int16)), "nothing was written"
