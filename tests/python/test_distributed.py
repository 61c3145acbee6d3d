"""torch.distributed on ember tensors (python/ember/distributed.py; docs/architecture.md,
"Past one machine"). Two ranks per test, started with torch.multiprocessing spawn,
rendezvous through a file store, gloo on loopback. Every collective on ember tensors is
checked against the same collective on CPU tensors in the same group; DDP against eager
CPU DDP and a single-process run on the combined batch.

Robust under load: no timing assertions; every wait is bounded by the group's timeout
(generous, since a rank may be compiling a graph while the other waits for it)."""

import datetime
import os
import warnings

import ember
import torch.distributed as dist
import torch.multiprocessing as mp

import torch

WORLD = 2
TIMEOUT = datetime.timedelta(seconds=120)
EMBER = torch.device("ember")


def _spawn(fn, tmp_path, *args):
    store = str(tmp_path / "store")
    mp.spawn(fn, args=(store, *args), nprocs=WORLD, join=True)


def _init(rank, store, backend):
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message=".*is deprecated. Please use", category=FutureWarning)
    dist.init_process_group(
        backend, init_method=f"file://{store}", rank=rank, world_size=WORLD, timeout=TIMEOUT
    )


def _same(ember_tensor, cpu_tensor, what):
    got = ember_tensor.cpu()
    assert got.dtype == cpu_tensor.dtype, (what, got.dtype, cpu_tensor.dtype)
    assert torch.equal(got, cpu_tensor), f"{what}: ember {got} != cpu {cpu_tensor}"


def _collectives(rank, group, name):
    """Each collective on ember tensors against the same one on CPU tensors."""
    W = WORLD

    def value(shape=(3, 4), dtype=torch.float32):
        """A rank-dependent ember tensor (device data: no program to compile) and its CPU
        twin; the cases below that need pending or in-flight inputs make their own."""
        n = 1
        for s in shape:
            n *= s
        cpu = (torch.arange(n, dtype=torch.float32).reshape(shape) * (rank + 1) + rank).to(dtype)
        return cpu.to(EMBER), cpu

    for op in (dist.ReduceOp.SUM, dist.ReduceOp.MIN, dist.ReduceOp.MAX, dist.ReduceOp.PRODUCT):
        e, c = value()
        dist.all_reduce(e, op=op, group=group)
        dist.all_reduce(c, op=op, group=group)
        _same(e, c, f"{name} all_reduce {op}")
    # gloo has no AVG: ember computes SUM / world size.
    e, c = value()
    dist.all_reduce(e, op=dist.ReduceOp.AVG, group=group)
    dist.all_reduce(c, group=group)
    _same(e, c / W, f"{name} all_reduce AVG")
    for dtype in (torch.bfloat16, torch.float16, torch.int64):
        e, c = value(dtype=dtype)
        dist.all_reduce(e, group=group)
        dist.all_reduce(c, group=group)
        _same(e, c, f"{name} all_reduce {dtype}")

    # An input computed by a pending program, and one by a queued (in-flight) program.
    e, c = value()
    e = e * 2
    dist.all_reduce(e, group=group)
    dist.all_reduce(c, group=group)
    _same(e, c * 2, f"{name} all_reduce of a pending value")
    e, c = value()
    e = e * 2
    ember.sync(wait=False)
    dist.all_reduce(e, group=group)
    dist.all_reduce(c, group=group)
    _same(e, c * 2, f"{name} all_reduce of an in-flight value")
    # The result feeds later traced ops.
    _same(e + 1, c * 2 + 1, f"{name} ops traced on a collective's result")

    # Pending in-place updates are applied before the collective reads its buffer.
    buf = torch.zeros(2, 16, device=EMBER)
    t = torch.arange(16.0, device=EMBER) + rank
    buf[0, :12] = t[:12]
    dist.all_reduce(buf, group=group)
    want = torch.zeros(2, 16)
    want[0, :12] = sum(torch.arange(12.0) + r for r in range(W))
    _same(buf, want, f"{name} all_reduce after a pending in-place write")
    # A collective on a view writes through to its base.
    base = torch.zeros(2, 4, device=EMBER)
    row = base[1]
    row.add_(rank + 1)
    dist.all_reduce(row, group=group)
    _same(base, torch.tensor([[0.0] * 4, [3.0] * 4]), f"{name} all_reduce of a view")

    for src in range(W):
        e, c = value()
        dist.broadcast(e, src=src, group=group)
        dist.broadcast(c, src=src, group=group)
        _same(e, c, f"{name} broadcast from {src}")

    e, c = value()
    outs_e = [torch.empty(3, 4, device=EMBER) for _ in range(W)]
    outs_c = [torch.empty(3, 4) for _ in range(W)]
    dist.all_gather(outs_e, e, group=group)
    dist.all_gather(outs_c, c, group=group)
    for i in range(W):
        _same(outs_e[i], outs_c[i], f"{name} all_gather [{i}]")

    # all_gather_into_tensor / reduce_scatter_tensor: torch 2.13's deprecated names of
    # all_gather_single / reduce_scatter_single (FSDP2 still calls them).
    for gather in (dist.all_gather_single, dist.all_gather_into_tensor):
        e, c = value()
        out_e = torch.empty(3 * W, 4, device=EMBER)
        out_c = torch.empty(3 * W, 4)
        gather(out_e, e, group=group)
        gather(out_c, c, group=group)
        _same(out_e, out_c, f"{name} {gather.__name__}")

    for scatter in (dist.reduce_scatter_single, dist.reduce_scatter_tensor):
        e, c = value((W * 2, 3))
        out_e = torch.empty(2, 3, device=EMBER)
        out_c = torch.empty(2, 3)
        scatter(out_e, e, group=group)
        scatter(out_c, c, group=group)
        _same(out_e, out_c, f"{name} {scatter.__name__}")
        scatter(out_e, e, op=dist.ReduceOp.AVG, group=group)
        _same(out_e, out_c / W, f"{name} {scatter.__name__} AVG")

    e, c = value((W, 5))
    out_e = torch.empty(5, device=EMBER)
    out_c = torch.empty(5)
    dist.reduce_scatter(out_e, list(e.unbind(0)), group=group)
    dist.reduce_scatter(out_c, list(c.unbind(0)), group=group)
    _same(out_e, out_c, f"{name} reduce_scatter")

    e, c = value((W * 3,))
    out_e = torch.empty(W * 3, device=EMBER)
    out_c = torch.empty(W * 3)
    dist.all_to_all_single(out_e, e, group=group)
    dist.all_to_all_single(out_c, c, group=group)
    _same(out_e, out_c, f"{name} all_to_all_single")
    # Uneven splits: rank r sends r + 1 elements to every peer.
    e, c = value((W * (rank + 1),))
    out_e = torch.empty(sum(r + 1 for r in range(W)), device=EMBER)
    out_c = torch.empty_like(out_e, device="cpu")
    splits_in = [rank + 1] * W
    splits_out = [r + 1 for r in range(W)]
    dist.all_to_all_single(out_e, e, splits_out, splits_in, group=group)
    dist.all_to_all_single(out_c, c, splits_out, splits_in, group=group)
    _same(out_e, out_c, f"{name} all_to_all_single with uneven splits")

    # reduce, gather and scatter, to rank 1 / from rank 1.
    root = dist.get_global_rank(group, 1) if group is not None else 1
    e, c = value()
    dist.reduce(e, root, group=group)
    dist.reduce(c, root, group=group)
    _same(e, c, f"{name} reduce")
    e, c = value()
    outs_e = [torch.empty(3, 4, device=EMBER) for _ in range(W)] if rank == 1 else None
    outs_c = [torch.empty(3, 4) for _ in range(W)] if rank == 1 else None
    dist.gather(e, outs_e, dst=root, group=group)
    dist.gather(c, outs_c, dst=root, group=group)
    for i in range(W if rank == 1 else 0):
        _same(outs_e[i], outs_c[i], f"{name} gather [{i}]")
    e, c = value((W, 3))
    out_e, out_c = torch.empty(3, device=EMBER), torch.empty(3)
    dist.scatter(out_e, list(e.unbind(0)) if rank == 1 else None, src=root, group=group)
    dist.scatter(out_c, list(c.unbind(0)) if rank == 1 else None, src=root, group=group)
    _same(out_e, out_c, f"{name} scatter")

    dist.barrier(group=group)

    # send/recv: rank 0 sends to rank 1, which sends its sum back.
    peer = 1 - rank
    gpeer = dist.get_global_rank(group, peer) if group is not None else peer
    e, c = value((4,))
    box = torch.zeros(4, device=EMBER)
    if rank == 0:
        dist.send(e, gpeer, group=group)
        dist.recv(box, gpeer, group=group)
        _same(box, c + (torch.arange(4.0) * 2 + 1), f"{name} send/recv")
    else:
        dist.recv(box, gpeer, group=group)
        dist.send(box + e, gpeer, group=group)
        _same(box, torch.arange(4.0), f"{name} recv")

    # async_op=True: Work handles; their futures hold the ember tensors.
    (e1, c1), (e2, c2) = value(), value((5,))
    w1 = dist.all_reduce(e1, group=group, async_op=True)
    w2 = dist.all_reduce(e2, op=dist.ReduceOp.MAX, group=group, async_op=True)
    w2.wait()
    w1.wait()
    assert w1.is_completed() and w2.is_completed()
    (fut_value,) = w1.get_future().value()
    assert fut_value.device.type == "ember"
    dist.all_reduce(c1, group=group)
    dist.all_reduce(c2, op=dist.ReduceOp.MAX, group=group)
    _same(e1, c1, f"{name} async all_reduce")
    _same(fut_value, c1, f"{name} async all_reduce's future")
    _same(e2, c2, f"{name} async all_reduce MAX")


def _collectives_worker(rank, store):
    _init(rank, store, "ember")
    assert dist.get_backend() == "ember"
    _collectives(rank, None, "ember")
    for backend in ("cpu:gloo,ember:ember", "gloo"):
        group = dist.new_group(backend=backend, timeout=TIMEOUT)
        _collectives(rank, group, backend)
    dist.destroy_process_group()


def test_collectives_match_cpu(tmp_path):
    _spawn(_collectives_worker, tmp_path)


# ----------------------------------------------------------------------------- DDP
BATCH = 8  # the combined batch; each rank trains on BATCH // WORLD samples of it
STEPS = 3
LR = 0.5  # large, so that a gradient missing its all-reduce shows


def _mlp(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def _batches():
    g = torch.Generator().manual_seed(1234)
    return [
        (torch.randn(BATCH, 6, generator=g), torch.randn(BATCH, 3, generator=g))
        for _ in range(STEPS)
    ]


def _train_ddp(rank, group, name):
    from torch.nn.parallel import DistributedDataParallel as DDP

    lo, hi = rank * BATCH // WORLD, (rank + 1) * BATCH // WORLD
    # Different initial parameters per rank: DDP broadcasts rank 0's.
    ember_model = DDP(_mlp(seed=rank).to(EMBER), process_group=group, bucket_cap_mb=1e-4)
    cpu_model = DDP(_mlp(seed=rank), process_group=group)
    single = _mlp(seed=0)
    for p, q in zip(ember_model.parameters(), single.parameters()):
        _same(p, q.detach(), f"{name}: DDP's initial broadcast")
    opts = [torch.optim.SGD(m.parameters(), lr=LR) for m in (ember_model, cpu_model, single)]
    loss_fn = torch.nn.functional.mse_loss
    for step, (x, y) in enumerate(_batches()):
        for o in opts:
            o.zero_grad()
        loss_fn(ember_model(x[lo:hi].to(EMBER)), y[lo:hi].to(EMBER)).backward()
        loss_fn(cpu_model(x[lo:hi]), y[lo:hi]).backward()
        loss_fn(single(x), y).backward()
        params = zip(ember_model.named_parameters(), cpu_model.parameters(), single.parameters())
        for (n, p), q, s in params:
            what = f"{name} step {step} {n}.grad"
            g = p.grad.cpu()
            torch.testing.assert_close(g, q.grad, msg=lambda m, w=what: f"{w} vs CPU DDP: {m}")
            torch.testing.assert_close(g, s.grad, msg=lambda m, w=what: f"{w} vs single: {m}")
        for o in opts:
            o.step()
        # Parameters stay bit-identical across ranks.
        flat = torch.cat([p.detach().reshape(-1) for p in ember_model.parameters()])
        gathered = [torch.empty_like(flat) for _ in range(WORLD)]
        dist.all_gather(gathered, flat, group=group)
        for r in range(1, WORLD):
            _same(gathered[r], gathered[0].cpu(), f"{name} step {step}: parameters of rank {r}")
        for p, s in zip(ember_model.parameters(), single.parameters()):
            what = f"{name} step {step}: parameters vs single"
            torch.testing.assert_close(
                p.detach().cpu(), s.detach(), msg=lambda m, w=what: f"{w}: {m}"
            )


def _ddp_worker(rank, store):
    _init(rank, store, "ember")
    _train_ddp(rank, None, "ember")
    _train_ddp(rank, dist.new_group(backend="gloo", timeout=TIMEOUT), "gloo")
    dist.destroy_process_group()


def test_ddp_matches_single_process_and_cpu_ddp(tmp_path):
    """DDP over an "ember" group and over a plain "gloo" group: several gradient buckets,
    a large learning rate."""
    _spawn(_ddp_worker, tmp_path)


def test_backend_is_registered_for_ember():
    assert "ember" in dist.Backend.backend_list
    assert dist.Backend.default_device_backend_map["ember"] == "ember"
    assert dist.Backend.default_device_backend_map["cpu"] == "gloo"
    assert os.environ.get("EMBER_CACHE_DIR")  # spawned ranks share the session's cache


# --------------------------------------------------------------------------- FSDP2
def _fsdp_worker(rank, store):
    """fully_shard on a 2-rank "ember" mesh against a single-process run on the combined
    batch; ColwiseParallel/RowwiseParallel against the unsharded model; functional
    collectives and DTensor.full_tensor() (their all-gather)."""
    _init(rank, store, "ember")
    import torch.distributed._functional_collectives as funcol
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    x = torch.arange(4.0) + rank
    got = funcol.all_reduce(x.to(EMBER), "sum", dist.group.WORLD)
    _same(got, torch.arange(4.0) * 2 + 1, "funcol.all_reduce")
    got = funcol.all_gather_tensor(x.to(EMBER), 0, dist.group.WORLD)
    _same(got, torch.cat([torch.arange(4.0), torch.arange(4.0) + 1]), "funcol.all_gather_tensor")

    mesh = init_device_mesh("ember", (WORLD,))
    model = _mlp(seed=0).to(EMBER)
    single = _mlp(seed=0)
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    for p, s in zip(model.parameters(), single.parameters()):
        # dim-0 shards: rank r holds rows [r * ceil(n / 2), ...)
        rows = -(-s.shape[0] // WORLD)
        want = s.detach()[rank * rows : (rank + 1) * rows]
        _same(p._local_tensor, want, "fully_shard's local shard")
    opts = [torch.optim.SGD(m.parameters(), lr=LR) for m in (model, single)]
    lo, hi = rank * BATCH // WORLD, (rank + 1) * BATCH // WORLD
    loss_fn = torch.nn.functional.mse_loss
    for step, (x, y) in enumerate(_batches()):
        for o in opts:
            o.zero_grad()
        loss_fn(model(x[lo:hi].to(EMBER)), y[lo:hi].to(EMBER)).backward()
        loss_fn(single(x), y).backward()
        for p, s in zip(model.parameters(), single.parameters()):
            what = f"FSDP2 step {step}: gradient vs single"
            torch.testing.assert_close(
                p.grad.full_tensor().cpu(), s.grad, msg=lambda m, w=what: f"{w}: {m}"
            )
        for o in opts:
            o.step()
        for p, s in zip(model.parameters(), single.parameters()):
            what = f"FSDP2 step {step}: parameters vs single"
            torch.testing.assert_close(
                p.full_tensor().cpu(), s.detach(), msg=lambda m, w=what: f"{w}: {m}"
            )

    # Tensor parallel on the same mesh: the first Linear column-sharded, the second
    # row-sharded; output and gradients against the unsharded model.
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    tp = parallelize_module(
        _mlp(seed=0).to(EMBER), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()}
    )
    whole = _mlp(seed=0)
    x, y = _batches()[0]
    out = tp(x.to(EMBER))
    loss_fn(out, y.to(EMBER)).backward()
    want = whole(x)
    loss_fn(want, y).backward()
    torch.testing.assert_close(out.cpu(), want)
    for p, s in zip(tp.parameters(), whole.parameters()):
        assert p._local_tensor.numel() < s.numel() or s.dim() == 1
        torch.testing.assert_close(p.grad.full_tensor().cpu(), s.grad)
    dist.destroy_process_group()


def test_fsdp2_and_tensor_parallel_match_a_single_process(tmp_path):
    _spawn(_fsdp_worker, tmp_path)


# ------------------------------------------------------------- single-process pieces
class _LocalWrapper(torch.Tensor):
    """A wrapper subclass over an ember tensor that runs every op on the wrapped tensor
    from its __torch_dispatch__, as DTensor does with its local tensor."""

    @staticmethod
    def __new__(cls, t):
        return torch.Tensor._make_wrapper_subclass(cls, t.shape, dtype=t.dtype, device=t.device)

    def __init__(self, t):
        self.t = t

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        def unwrap(x):
            return x.t if isinstance(x, _LocalWrapper) else x

        return func(*[unwrap(a) for a in args], **{k: unwrap(v) for k, v in (kwargs or {}).items()})


def test_in_place_op_below_a_subclass_writes_through_a_view():
    # torch runs __torch_dispatch__'s ops with Functionalize excluded; the in-place add on
    # a view must still reach functionalization and write into the base.
    base = torch.zeros(8, device=EMBER)
    _LocalWrapper(base[2:6]).add_(_LocalWrapper(torch.ones(4, device=EMBER)))
    assert base.cpu().tolist() == [0, 0, 1, 1, 1, 1, 0, 0]


def test_streams_and_events_of_the_one_stream():
    s = torch.ember.Stream(priority=-1)
    assert s.priority == -1 and s.device == torch.device("ember", 0)
    assert torch.ember.current_stream() == torch.ember.default_stream()
    with torch.ember.stream(s):
        assert torch.ember.current_stream() is s
    assert torch.ember.current_stream() is not s
    y = torch.arange(4.0, device=EMBER) * 3
    s.wait_stream(torch.ember.current_stream())
    e = torch.ember.Event()
    assert e.record() is None
    s.wait_event(e)
    e.synchronize()  # waits for every queued program: y's value is computed
    before = ember.metrics.counters()["syncs"]
    assert y.cpu().tolist() == [0.0, 3.0, 6.0, 9.0]
    assert ember.metrics.counters()["syncs"] == before
    assert s.record_event().query()
