"""Activation checkpointing (``torch.utils.checkpoint``) on the ember device, with user
code unchanged (docs/architecture.md, "Checkpointing").

On the lazy device a training step's forward and backward are one program, so the
recompute that ``torch.utils.checkpoint`` runs in the backward would compute the same
ops on the same values as the forward it replaces, and common-subexpression
elimination would merge the two: the forward's activations would then live until the
backward, as without checkpointing. ``import ember`` therefore makes every recompute of
a checkpointed region read its tensor inputs through ``ember::optimization_barrier``
(``barrier()`` below), which lowers to the core IR's ``optimization-barrier``: no pass
merges, folds or moves a computation across it. In reentrant mode the barrier also
takes the region's incoming gradients as anchors, so the recompute cannot be scheduled
before the backward reaches the region.

RNG: the ember generator's state is (seed, offset) and each random op draws its pair
at trace time, so restoring the state (``torch.ember.get_rng_state`` /
``set_rng_state``, which ``torch.utils.checkpoint`` calls because
``torch.ember._initialized`` is true) makes the recompute's dropout draw the forward's
pairs: bit-identical masks and gradients.

Selective activation checkpointing (``create_selective_checkpoint_contexts``): a
TorchDispatchMode sees ember's ops below functionalization, where ``detach`` is
``detach_copy``; the recompute's saved-tensor hook detaches what it saves, so
``detach_copy`` joins ``torch.utils.checkpoint.SAC_IGNORED_OPS`` (where ``detach`` is):
the forward, which detaches nothing, and the recompute then see the same op sequence.

Hooks (applied once, by ``install()``): ``torch.utils.checkpoint._CheckpointFrame``
(``use_reentrant=False``: its ``recompute_fn``),
``torch.utils.checkpoint.CheckpointFunction.backward`` (``use_reentrant=True``: its
``run_function``) and ``SAC_IGNORED_OPS``. Regions whose inputs are not ember tensors
are left alone.
"""

import functools

import torch
import torch.utils.checkpoint as _cp

_lib = torch.library.Library("ember", "FRAGMENT")
_lib.define("optimization_barrier(Tensor[] inputs, Tensor[] anchors) -> Tensor[]")


def _barrier_cpu(inputs, anchors):
    return [x.clone() for x in inputs]


def _barrier_meta(inputs, anchors):
    return [torch.empty_like(x) for x in inputs]


_lib.impl("optimization_barrier", _barrier_cpu, "CPU")
_lib.impl("optimization_barrier", _barrier_meta, "Meta")


class _Barrier(torch.autograd.Function):
    """Identity on `inputs` through the barrier; gradients pass through unchanged.
    Outputs of inputs that need no gradient are non-differentiable."""

    @staticmethod
    def forward(ctx, n, *tensors):
        inputs, anchors = list(tensors[:n]), list(tensors[n:])
        ctx.n, ctx.num_anchors = n, len(anchors)
        outs = torch.ops.ember.optimization_barrier(inputs, anchors)
        ctx.mark_non_differentiable(
            *[o for o, need in zip(outs, ctx.needs_input_grad[1 : n + 1]) if not need]
        )
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        return (None, *grads, *([None] * ctx.num_anchors))


def _anchor(t):
    """One element of `t` (a slice: the barrier then copies 1 element, not `t`)."""
    return t.reshape(-1)[:1]


def barrier(tensors, anchors=()):
    """`tensors` (a sequence of ember tensors) read through one optimization barrier that
    also waits for `anchors`: a tuple of tensors equal to `tensors` (same dtype, sizes,
    strides, requires_grad; gradients flow back unchanged) that no compiler pass merges
    with, or moves before, computations on the originals. Non-ember tensors and
    anchors are not allowed (ValueError)."""
    tensors = list(tensors)
    anchors = [_anchor(a) for a in anchors if a.numel() > 0]
    for t in tensors + anchors:
        if not isinstance(t, torch.Tensor) or t.device.type != "ember":
            raise ValueError(f"ember.checkpoint.barrier: expected ember tensors, got {t!r:.80}")
    if not tensors:
        return ()
    return _Barrier.apply(len(tensors), *tensors, *anchors)


def _apart(run, anchors=()):
    """`run` with its ember tensor arguments read through a barrier."""

    @functools.wraps(run)
    def recompute(*args):
        idx = [
            i
            for i, a in enumerate(args)
            if isinstance(a, torch.Tensor) and a.device.type == "ember"
        ]
        if not idx:
            return run(*args)
        outs = barrier([args[i] for i in idx], anchors)
        args = list(args)
        for i, o in zip(idx, outs):
            args[i] = o
        return run(*args)

    recompute._ember_apart = True
    return recompute


def _ember_anchors(grads):
    return [
        g
        for g in grads
        if isinstance(g, torch.Tensor) and g.device.type == "ember" and g.numel() > 0
    ]


_orig_frame_init = _cp._CheckpointFrame.__init__
_orig_reentrant_backward = _cp.CheckpointFunction.backward


def _frame_init(self, recompute_fn, *args, **kwargs):
    _orig_frame_init(self, _apart(recompute_fn), *args, **kwargs)


def _reentrant_backward(ctx, *grads):
    run = ctx.run_function
    if not getattr(run, "_ember_apart", False):
        ctx.run_function = _apart(run, _ember_anchors(grads))
    return _orig_reentrant_backward(ctx, *grads)


def install() -> None:
    """Hooks torch.utils.checkpoint (idempotent)."""
    if getattr(_cp, "_ember_installed", False):
        return
    _cp._CheckpointFrame.__init__ = _frame_init
    _cp.CheckpointFunction.backward = staticmethod(_reentrant_backward)
    _cp.SAC_IGNORED_OPS.add(torch.ops.aten.detach_copy.default)
    _cp._ember_installed = True
