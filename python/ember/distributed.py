"""torch.distributed on ember tensors over gloo (docs/architecture.md, "Past one machine").

``import ember`` does two things here:

* registers the c10d backend ``"ember"`` (``torch.distributed.Backend.register_backend``,
  ``devices=["cpu", "ember"]``): ``init_process_group("ember")`` gives a group whose CPU
  and ember tensors share one ``ProcessGroupGloo``; ``"cpu:gloo,ember:ember"`` gives the
  CPU tensors torch's own gloo backend and the ember tensors a second one created here;
* registers a Functionalize kernel for every ``c10d`` collective op
  (``c10d::allreduce_``, ``c10d::_allgather_base_``, ...), the dispatcher ops that
  ``torch.distributed``'s Python API, DDP's C++ reducer and ``_broadcast_coalesced`` all
  go through. Ember tensors are functional tensors, so every such call on them reaches
  this kernel, which stages them through host tensors:

  1. the tensors the collective reads are copied to host tensors (``Tensor.cpu()``: a
     value read, so the pending work that produces them is synced, pending in-place
     updates included, and the caller waits for the queued program that computes them);
     tensors it only writes get uninitialized host buffers;
  2. the same op runs on the host tensors with gloo: the group's backend for ember if it
     has one, otherwise the group's CPU backend (so a plain ``"gloo"`` group works with
     ember tensors too), and the caller waits for it;
  3. the results are written back into the ember tensors with ``copy_`` (an in-place
     update, so views of them see it) and a completed ``Work`` whose future holds the
     ember tensors is returned (DDP's reducer reads its bucket from that future).

  A collective therefore completes before its call returns, also with
  ``async_op=True`` (the ``Work`` is already complete); every rank issues collectives
  from its own thread in program order, which is their order on the wire.

Reductions: SUM, PRODUCT, MIN, MAX, BAND, BOR, BXOR are gloo's. gloo lacks AVG: ember
computes it as SUM divided by the group size (floating-point tensors only; others raise).
gloo lacks PREMUL_SUM: it raises gloo's error. Dtypes: whatever gloo supports for the
op on CPU tensors (float16 and bfloat16 included); anything else raises gloo's error.
"""

import torch.distributed as dist
from torch._C._distributed_c10d import (
    ProcessGroup,
    ProcessGroupGloo,
    Work,
    _create_work_from_future,
)

import torch

# Ops whose first argument is read as well as written (the rest write it only).
_READ_WRITE = {"allreduce_", "allreduce_coalesced_", "broadcast_", "reduce_"}
# Ops that write no tensor argument.
_NO_WRITE = {"send", "barrier", "monitored_barrier_"}
# Ops with a ReduceOp argument whose AVG ember computes as SUM / group size.
_REDUCING = {
    "allreduce_",
    "allreduce_coalesced_",
    "reduce_scatter_",
    "_reduce_scatter_base_",
    "reduce_scatter_tensor_coalesced_",
    "reduce_",
}
_AVG = 1  # c10d::ReduceOp::RedOpType::AVG
_EMBER = torch.device("ember")

# id(gloo backend made by _create_backend) -> (backend, ProcessGroup routing host
# tensors to it). The backend is kept alive so the id stays its own.
_BACKENDS = {}


def _create_backend(opts, backend_options):
    """The c10d creator of backend "ember" (extended API): a ProcessGroupGloo."""
    gloo = ProcessGroupGloo(opts.store, opts.group_rank, opts.group_size, opts.timeout)
    gloo.options.global_ranks_in_group = list(opts.global_ranks_in_group)
    gloo.options.group_name = opts.group_id
    host = ProcessGroup(opts.store, opts.group_rank, opts.group_size)
    host._register_backend(torch.device("cpu"), ProcessGroup.BackendType.GLOO, gloo)
    host._set_default_backend(ProcessGroup.BackendType.GLOO)
    _BACKENDS[id(gloo)] = (gloo, host)
    return gloo


def _host_group(pg_obj):
    """The boxed process group that runs the host copies of a collective on `pg_obj`'s
    ember tensors: its ember backend's, else `pg_obj` itself (its CPU backend)."""
    pg = ProcessGroup.unbox(pg_obj)
    try:
        backend = pg._get_backend(_EMBER)
    except RuntimeError:  # no backend for ember (a plain "gloo" group): its CPU one
        return pg_obj, pg
    entry = _BACKENDS.get(id(backend))
    if entry is None:
        return pg_obj, pg
    return entry[1].boxed(), pg


def _is_ember(x):
    return isinstance(x, torch.Tensor) and x.device.type == "ember"


def _stage(x, read, written):
    """`x` (a tensor, a list, or a list of lists) with each ember tensor replaced by a
    host tensor: its value if `read`, else an uninitialized buffer of its shape and
    dtype. (ember, host) pairs to write back go to `written` when it is a list."""
    if isinstance(x, (list, tuple)):
        return [_stage(e, read, written) for e in x]
    if not _is_ember(x):
        return x
    with torch.no_grad():
        host = x.detach().cpu() if read else torch.empty(x.shape, dtype=x.dtype)
    if written is not None:
        written.append((x, host))
    return host


def _flat_ember(x):
    if isinstance(x, (list, tuple)):
        return [t for e in x for t in _flat_ember(e)]
    return [x]


def _has_ember(x):
    if isinstance(x, (list, tuple)):
        return any(_has_ember(e) for e in x)
    return _is_ember(x)


def _kernel(name):
    op = getattr(torch.ops.c10d, name).default
    schema = op._schema
    pg_index = next(i for i, a in enumerate(schema.arguments) if "ProcessGroup" in str(a.type))
    op_index = next((i for i, a in enumerate(schema.arguments) if "ReduceOp" in str(a.type)), None)
    writes = name not in _NO_WRITE
    reads_first = name in _READ_WRITE or not writes

    def kernel(*args, **kwargs):
        args = list(args)
        if not any(_has_ember(a) for a in args):
            return _below_functionalize(op, args, kwargs)
        first = args[0]
        written = []
        args[0] = _stage(args[0], reads_first, written if writes else None)
        for i in range(1, len(args)):
            args[i] = _stage(args[i], True, None)
        args[pg_index], pg = _host_group(args[pg_index])
        average = op_index is not None and args[op_index].op() == _AVG
        if average:
            for _, host in written:
                if not host.is_floating_point():
                    raise RuntimeError(
                        f"ember: {name} with ReduceOp.AVG needs floating-point tensors "
                        f"(gloo has no AVG; ember computes SUM / group size); got {host.dtype}"
                    )
            args[op_index] = torch.classes.c10d.ReduceOp()  # SUM
        result = op(*args, **kwargs)
        host_work = result[-1] if isinstance(result, tuple) else result
        if host_work is not None:
            Work.unbox(host_work).wait()
        with torch.no_grad():
            for target, host in written:
                if average:
                    host = host / pg.size()
                target.copy_(host)
        if host_work is None:
            return result
        fut = torch.futures.Future()
        fut.set_result(_flat_ember(first))
        work = _create_work_from_future(fut).boxed()
        if not isinstance(result, tuple):
            return work
        return (*_ember_results(result[:-1], written), work)

    return kernel


def _below_functionalize(op, args, kwargs):
    """What torch's Functionalize fallback does for functional tensors that are not
    ember's (functionalized CPU tensors): sync and unwrap them, run the op below."""

    def unwrap(x):
        if isinstance(x, (list, tuple)):
            return [unwrap(e) for e in x]
        if isinstance(x, torch.Tensor) and torch._is_functional_tensor(x):
            torch._sync(x)
            return torch._from_functional_tensor(x)
        return x

    with torch._C._ExcludeDispatchKeyGuard(
        torch._C.DispatchKeySet(torch._C.DispatchKey.Functionalize)
    ):
        return op(*[unwrap(a) for a in args], **kwargs)


def _ember_results(host_results, written):
    """The op's tensor results with each staged host tensor replaced by its ember one."""
    back = {id(host): target for target, host in written}

    def swap(x):
        if isinstance(x, (list, tuple)):
            return [swap(e) for e in x]
        return back.get(id(x), x)

    return [swap(r) for r in host_results]


# ------------------------------------------------ functional collectives (_c10d_functional)
# torch.distributed._functional_collectives (DTensor's redistribute, full_tensor(), tensor
# parallel) issue ops of library "_c10d_functional" that return new tensors and are
# completed by wait_tensor. On ember tensors their Functionalize kernel below runs the
# same op on host copies, waits for it, and returns ember tensors (in-place and out=
# variants write into their ember argument): already complete, so wait_tensor of an ember
# tensor returns it as is. Same order rule as the c10d ops above.
def _functional_kernel(name):
    op = getattr(torch.ops._c10d_functional, name).default
    schema = op._schema
    written = {
        a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write
    }
    names = [a.name for a in schema.arguments]

    def kernel(*args, **kwargs):
        if not any(_has_ember(a) for a in (*args, *kwargs.values())):
            return _below_functionalize(op, args, kwargs)
        if name == "wait_tensor":
            return args[0]
        pairs = []
        host_args = [
            _stage(a, True, pairs if names[i] in written else None) for i, a in enumerate(args)
        ]
        host_kwargs = {
            k: _stage(v, True, pairs if k in written else None) for k, v in kwargs.items()
        }
        out = op(*host_args, **host_kwargs)
        results = out if isinstance(out, (list, tuple)) else [out]
        for r in results:
            torch.ops._c10d_functional.wait_tensor(r)
        with torch.no_grad():
            for target, host in pairs:
                target.copy_(host)
            back = {id(host): target for target, host in pairs}
            ember = [back.get(id(r)) or r.to(_EMBER) for r in results]
        return ember if isinstance(out, (list, tuple)) else ember[0]

    return kernel


# ----------------------------------------------------------------- FSDP2's custom ops
# FSDP2 (torch.distributed.fsdp.fully_shard) copies parameters in and out of its flat
# communication buffers with ops of its own library "fsdp". Two write an `out=` argument
# (alias annotation `Tensor(a!)`), which torch's Functionalize fallback refuses, and
# all_gather_copy_in writes into a view of its second argument, which the fallback would
# run on unwrapped tensors. Their Functionalize kernels below do the same on ember
# tensors through functionalization (views and in-place copies), as their CPU kernels do.
def _fsdp_all_gather_copy_in(inputs, output, split_sizes, input_numel, rank):
    gather_input = output.narrow(0, input_numel * rank, input_numel)
    with torch.no_grad():
        torch._foreach_copy_(list(torch.split(gather_input, list(split_sizes))), list(inputs))
    return gather_input, output


def _fsdp_split_with_sizes_copy(gathered, split_sizes, dim=0, *, out):
    with torch.no_grad():
        for dst, src in zip(out, torch.split(gathered, list(split_sizes), dim=dim), strict=True):
            dst.copy_(src)


def _fsdp_chunk_cat(tensors, dim, num_chunks, *, out):
    with torch.no_grad():
        out.copy_(torch._chunk_cat(list(tensors), dim, num_chunks))


_FSDP_LIB = []


def _install_fsdp_kernels():
    lib = torch.library.Library("fsdp", "IMPL")
    lib.impl("all_gather_copy_in", _fsdp_all_gather_copy_in, "Functionalize")
    lib.impl("split_with_sizes_copy", _fsdp_split_with_sizes_copy, "Functionalize")
    lib.impl("chunk_cat", _fsdp_chunk_cat, "Functionalize")
    _FSDP_LIB.append(lib)


_LIB = None
_FUNCTIONAL_LIB = []


def install():
    """Register backend "ember" and the Functionalize kernels of the c10d ops."""
    global _LIB
    if _LIB is not None or not dist.is_available():
        return
    dist.Backend.register_backend(
        "ember", _create_backend, extended_api=True, devices=["cpu", "ember"]
    )
    _LIB = torch.library.Library("c10d", "IMPL")
    for qualified in sorted(torch._C._dispatch_get_all_op_names()):
        namespace, _, name = qualified.partition("::")
        if namespace != "c10d" or name == "check_for_nan":
            continue
        _LIB.impl(name, _kernel(name), "Functionalize")
    _FUNCTIONAL_LIB.append(torch.library.Library("_c10d_functional", "IMPL"))
    for qualified in sorted(torch._C._dispatch_get_all_op_names()):
        namespace, _, name = qualified.partition("::")
        if namespace == "_c10d_functional":
            _FUNCTIONAL_LIB[0].impl(name, _functional_kernel(name), "Functionalize")
    from . import _post_import

    _post_import.when_imported(
        "torch.distributed.fsdp._fully_shard._fsdp_collectives", _install_fsdp_kernels
    )
