"""f32 master weights for pure-bf16 training (docs/architecture.md, "Mixed precision").

Training with the parameters themselves in bf16 ("bf16-true") loses every update
smaller than half the gap between a parameter and its bf16 neighbour: bf16 keeps 8
significant bits, so ``p - lr * u`` rounds back to ``p`` whenever ``|lr * u|`` is below
about ``|p| * 2**-9`` to ``|p| * 2**-8`` (0.004 for p just above 1); as the learning rate
decays, more and more of the optimizer's updates vanish and training stalls. ``MasterWeights`` keeps an f32 copy of each bf16 parameter: the optimizer steps
the f32 copies (bf16 gradients widened to f32), and each step writes the rounded result
back into the bf16 parameters the model computes with, so small updates accumulate in
f32 until they show. The memory cost is 4 bytes per parameter more (6 in all, against
eager f32's 4 and bf16-true's 2, optimizer state aside).

    model = model.to(torch.bfloat16)
    opt = ember.amp.MasterWeights(model.parameters(), torch.optim.AdamW, lr=1e-3)
    ...; loss.backward(); opt.step(); opt.zero_grad()

Works on any device (ember, CPU); parameters that are not bf16/f16 are stepped as they
are (their master is the parameter itself).
"""

import torch

_LOW = (torch.bfloat16, torch.float16)


class MasterWeights:
    """An optimizer over f32 masters of low-precision parameters.

    params: parameters or param-group dicts (as for any torch optimizer); optimizer_cls:
    the optimizer class (e.g. torch.optim.AdamW) built over the masters with **kwargs.
    ``step()``, ``zero_grad()``, ``param_groups`` (the inner optimizer's: set the
    learning rate there), ``state_dict()``/``load_state_dict()`` (the inner optimizer's
    plus the masters). Raises ValueError for a parameter that does not require grad."""

    def __init__(self, params, optimizer_cls, **kwargs):
        groups = list(params)
        if groups and not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        self._pairs = []  # (model parameter, master)
        master_groups = []
        for g in groups:
            masters = []
            for p in g["params"]:
                if not p.requires_grad:
                    raise ValueError("MasterWeights: every parameter must require grad")
                if p.dtype in _LOW:
                    m = p.detach().to(torch.float32).requires_grad_()
                else:
                    m = p
                self._pairs.append((p, m))
                masters.append(m)
            master_groups.append({**g, "params": masters})
        self.optimizer = optimizer_cls(master_groups, **kwargs)

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    @property
    def masters(self):
        """The f32 masters, in parameter order."""
        return [m for _, m in self._pairs]

    def step(self, closure=None):
        """Widens the gradients into the masters, steps them, writes them back."""
        if closure is not None:
            raise ValueError("MasterWeights.step: closures are not supported")
        with torch.no_grad():
            for p, m in self._pairs:
                if m is not p:
                    m.grad = None if p.grad is None else p.grad.to(torch.float32)
        self.optimizer.step()
        with torch.no_grad():
            for p, m in self._pairs:
                if m is not p:
                    p.copy_(m)

    def zero_grad(self, set_to_none=True):
        for p, m in self._pairs:
            if set_to_none:
                p.grad = None
                m.grad = None
            else:
                for t in (p, m):
                    if t.grad is not None:
                        t.grad.zero_()

    def state_dict(self):
        return {
            "optimizer": self.optimizer.state_dict(),
            "masters": [m.detach().to("cpu") for _, m in self._pairs],
        }

    def load_state_dict(self, state):
        self.optimizer.load_state_dict(state["optimizer"])
        with torch.no_grad():
            for (p, m), saved in zip(self._pairs, state["masters"]):
                m.copy_(saved)
                if m is not p:
                    p.copy_(m)
