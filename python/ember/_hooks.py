"""Sync after optimizer.step() (ember.config.sync_on_optimizer_step)."""
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


# ---- module.to("ember") keeps tied parameters tied --------------------------------
# Module._apply replaces a parameter by a new Parameter when the converted tensor cannot
# be shallow-copied into the old one (always so for ember: its tensors are
# functionalization wrappers). A parameter shared by two modules (tied embeddings) would
# then become two. Eager CUDA keeps it (set_data path); so do we: after the outermost
# _apply, every place that held one parameter holds the same new one.
import threading as _threading

_apply_depth = _threading.local()
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
