"""Training-loop hooks: sync after optimizer.step() (ember.config.sync_on_optimizer_step),
sync between accumulated backward passes (ember.config.sync_on_accumulate), and
module.to("ember") keeping tied parameters tied."""

import functools
import threading

import torch

from . import _C, config


def _uses_ember(optimizer) -> bool:
    for group in optimizer.param_groups:
        for p in group["params"]:
            return p.device.type == "ember"
    return False


def _after_step(optimizer, args, kwargs):
    if config.sync_on_optimizer_step and _uses_ember(optimizer):
        _C.sync("optimizer.step()")


from torch.optim.optimizer import register_optimizer_step_post_hook

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
    if on_ember:
        out = _on_calling_thread(_orig_backward, tensors, *args, **kwargs)
    else:
        out = _orig_backward(tensors, *args, **kwargs)
    if config.sync_on_accumulate and on_ember:
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


# ---- module.to("ember") keeps tied parameters tied --------------------------------
# Module._apply replaces a parameter by a new Parameter when the converted tensor cannot
# be shallow-copied into the old one (always so for ember: its tensors are
# functionalization wrappers). A parameter shared by two modules (tied embeddings) would
# then become two. Eager CUDA keeps it (set_data path); so do we: after the outermost
# _apply, every place that held one parameter holds the same new one.
_apply_depth = threading.local()
_orig_apply = torch.nn.Module._apply


def _param_sites(module):
    sites = {}
    for mod in module.modules():
        for name, p in mod._parameters.items():
            if p is not None:
                sites.setdefault(id(p), []).append((mod, name))
    return sites


def _apply(self, fn, recurse=True):
    depth = getattr(_apply_depth, "n", 0)
    if depth:
        _apply_depth.n = depth + 1
        try:
            return _orig_apply(self, fn, recurse)
        finally:
            _apply_depth.n = depth
    shared = {k: v for k, v in _param_sites(self).items() if len(v) > 1}
    _apply_depth.n = 1
    try:
        out = _orig_apply(self, fn, recurse)
    finally:
        _apply_depth.n = 0
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
