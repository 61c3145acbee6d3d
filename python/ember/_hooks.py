"""Training-loop hooks: sync after optimizer.step() (ember.config.sync_on_optimizer_step),
sync between accumulated backward passes (ember.config.sync_on_accumulate), and
module.to("ember") keeping each parameter the same object (so an optimizer built before
the move trains the moved model, as with CUDA) and tied parameters tied."""

import functools
import itertools
import threading
import weakref

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from . import _C, config


def _uses_ember(optimizer) -> bool:
    for group in optimizer.param_groups:
        for p in group["params"]:
            return p.device.type == "ember"
    return False


def _after_step(optimizer, args, kwargs):
    if config.sync_on_optimizer_step and _uses_ember(optimizer):
        _C.sync("optimizer.step()")


register_optimizer_step_post_hook(_after_step)


# ---- gradient accumulation --------------------------------------------------------
# A backward adds its whole pass to the pending work; a loop that accumulates gradients
# over N micro-batches before optimizer.step() would otherwise run all N forward and
# backward passes as one graph, whose memory and compile time grow with N (and a new N
# is a new graph). When a backward on ember tensors ends and an earlier backward's work
# is still pending (no sync since), ember syncs: an ordinary step (forward, one
# backward, optimizer.step()) stays one graph, and accumulation runs two micro-batches
# per graph, with gradients carried between graphs as device data.
_accumulate_lock = threading.Lock()
_last_backward_sync = [-1]  # sync generation seen at the end of the last backward
_orig_backward = torch.autograd.backward


def _on_ember(tensors) -> bool:
    if isinstance(tensors, torch.Tensor):
        return tensors.device.type == "ember"
    if isinstance(tensors, (list, tuple)):
        return any(isinstance(t, torch.Tensor) and t.device.type == "ember" for t in tensors)
    return False


# ---- backward on the calling thread --------------------------------------------------
# The autograd engine runs a PrivateUse1 graph on a per-device worker thread (as for
# CUDA): each backward hands its roots to that thread and sleeps until it is done. An
# ember backward only records ops, so it needs no thread of its own; with autograd's
# multithreading disabled for the call (thread-local, what torch.autograd's
# set_multithreading_enabled(False) does) the engine runs it on the caller, as PyTorch
# does for its own lazy device. ember.config.backward_on_calling_thread switches it.
_is_multithreading = torch._C._is_multithreading_enabled
_set_multithreading = torch._C._set_multithreading_enabled


def _on_calling_thread(run, *args, **kwargs):
    if not (config.backward_on_calling_thread and _is_multithreading()):
        return run(*args, **kwargs)
    _set_multithreading(False)
    try:
        return run(*args, **kwargs)
    finally:
        _set_multithreading(True)


@functools.wraps(_orig_backward)
def _backward(tensors, *args, **kwargs):
    on_ember = _on_ember(tensors)
    # A backward started inside another one (reentrant checkpointing recomputes and
    # differentiates its region from the outer backward) is part of that backward's
    # work, not a micro-batch of its own.
    nested = torch._C._current_graph_task_id() != -1
    if on_ember:
        out = _on_calling_thread(_orig_backward, tensors, *args, **kwargs)
    else:
        out = _orig_backward(tensors, *args, **kwargs)
    if config.sync_on_accumulate and on_ember and not nested:
        generation = _C.sync_generation()
        with _accumulate_lock:
            pending_earlier = _last_backward_sync[0] == generation
            _last_backward_sync[0] = generation
        if pending_earlier:
            _C.sync("backward (gradient accumulation)")
    return out


torch.autograd.backward = _backward

_orig_grad = torch.autograd.grad


@functools.wraps(_orig_grad)
def _grad(outputs, *args, **kwargs):
    if _on_ember(outputs):
        return _on_calling_thread(_orig_grad, outputs, *args, **kwargs)
    return _orig_grad(outputs, *args, **kwargs)


torch.autograd.grad = _grad


# ---- module.to("ember") keeps parameters (and ties) --------------------------------
# Module._apply keeps a parameter's identity through a conversion only when the converted
# tensor can be shallow-copied into the old one (CPU <-> CUDA: the set_data path); an
# ember tensor (a functionalization wrapper) cannot, so torch would make a new Parameter
# per parameter. Code that builds the optimizer before moving the model (accelerate's
# `accelerator.prepare(model, optimizer)`, which re-points the optimizer only for XLA)
# would then step the stale CPU parameters and never train the model. For a conversion
# to, from or on ember, the outermost _apply therefore turns on torch's own alternative,
# swapping the converted tensor into the existing Parameter object
# (torch.__future__.set_swap_module_params_on_conversion; torch.utils.swap_tensors),
# provided every parameter can be swapped (no weakrefs, no other reference to its
# tensor); otherwise it falls back to new Parameters. Either way, every place that held
# one parameter holds one parameter after (tied embeddings stay tied).
_apply_depth = threading.local()
_orig_apply = torch.nn.Module._apply


def _param_sites(module):
    sites = {}
    for mod in module.modules():
        for name, p in mod._parameters.items():
            if p is not None:
                sites.setdefault(id(p), []).append((mod, name))
    return sites


def _involves_ember(module, fn) -> bool:
    """Whether `fn` (the conversion Module._apply applies) moves the module's tensors to,
    from or within ember: the first parameter or buffer is on ember, or an empty tensor
    like it lands on ember."""
    for t in itertools.chain(module.parameters(), module.buffers()):
        if t.device.type == "ember":
            return True
        try:
            with torch.no_grad():
                probe = fn(torch.empty(0, dtype=t.dtype, device=t.device))
        except Exception:  # noqa: BLE001 (a conversion we cannot probe: no swap)
            return False
        return isinstance(probe, torch.Tensor) and probe.device.type == "ember"
    return False


def _swappable(t) -> bool:
    """torch.utils.swap_tensors' preconditions for a parameter or gradient."""
    return not weakref.getweakrefs(t) and t._use_count() <= (2 if t.requires_grad else 1)


def _can_swap_all(module) -> bool:
    for p in module.parameters():
        if not _swappable(p) or (p.grad is not None and not _swappable(p.grad)):
            return False
    return True


def _apply(self, fn, recurse=True):
    depth = getattr(_apply_depth, "n", 0)
    if depth:
        _apply_depth.n = depth + 1
        try:
            return _orig_apply(self, fn, recurse)
        finally:
            _apply_depth.n = depth
    swap = (
        not torch.__future__.get_swap_module_params_on_conversion()
        and _involves_ember(self, fn)
        and _can_swap_all(self)
    )
    shared = {k: v for k, v in _param_sites(self).items() if len(v) > 1}
    _apply_depth.n = 1
    if swap:
        torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        out = _orig_apply(self, fn, recurse)
    finally:
        _apply_depth.n = 0
        if swap:
            torch.__future__.set_swap_module_params_on_conversion(False)
    for sites in shared.values():
        first_mod, first_name = sites[0]
        p = first_mod._parameters[first_name]
        if p is None or p.device.type != "ember":
            continue
        for mod, name in sites[1:]:
            if mod._parameters[name] is not p:
                mod._parameters[name] = p
    return out


torch.nn.Module._apply = _apply
