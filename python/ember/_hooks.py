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
