"""The backends compared, each as a runner of one workload in one mode.

``make_runner(backend, workload, mode)`` deep-copies the workload's CPU model (so every
backend starts from the same weights), moves it and the inputs to the backend's device
and returns a ``Runner``:

- ``step()`` runs one training step (forward, backward, ``AdamW.step()``, zero_grad) or
  one inference call (eval mode, no grad) and returns the loss / output tensor, possibly
  still pending;
- ``finish()`` waits until all work issued so far has executed (``ember.sync()`` for the
  lazy device; ``torch_xla.sync()`` + ``wait_device_ops()`` for XLA; nothing for the
  synchronous CPU backends), so a timed step includes its execution;
- ``to_cpu(t)`` reads a result back as a CPU float64 tensor (a tuple of results, such
  as a backward kernel's gradients, as one flat tensor).

Backends (``BACKENDS``): ``eager`` (CPU), ``inductor`` (``torch.compile(backend=
"inductor")`` of the model and of ``optimizer.step``), ``ember`` (lazy: ``ember.device()``
+ ``ember.sync()``), ``ember_compile`` (``torch.compile(backend="ember")``, only when that
backend is registered), ``torch_xla`` (PyTorch/XLA on ``PJRT_DEVICE=CPU``, only in its
own virtual environment through the worker).

Imports only torch at module level (the workers load this file by path without ember).
"""

from __future__ import annotations

import copy
import os

import torch

BACKENDS = ("eager", "inductor", "ember", "ember_compile", "torch_xla")
LABELS = {
    "eager": "eager CPU",
    "inductor": 'torch.compile(backend="inductor")',
    "ember": "ember lazy device",
    "ember_compile": 'torch.compile(backend="ember")',
    "torch_xla": "PyTorch/XLA (PJRT CPU)",
    "jax": "JAX/XLA:CPU (jax.jit; MLP only, jax_column.py)",
}
LR = 1e-3


def unavailable_reason(backend: str) -> str | None:
    """None when `backend` can run in this process, else why not (one line)."""
    if backend in ("eager", "inductor"):
        return None
    if backend == "ember":
        try:
            import ember  # noqa: F401
        except Exception as e:  # noqa: BLE001 - any import failure makes it absent
            return f"import ember failed: {type(e).__name__}: {e}"
        return None
    if backend == "ember_compile":
        reason = unavailable_reason("ember")
        if reason:
            return reason
        import torch._dynamo

        if "ember" not in torch._dynamo.list_backends(exclude_tags=()):
            return 'absent: no torch.compile backend named "ember" is registered yet'
        return None
    if backend == "torch_xla":
        try:
            import torch_xla  # noqa: F401
        except Exception as e:  # noqa: BLE001
            return f"import torch_xla failed: {type(e).__name__}: {e}"
        return None
    raise ValueError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")


class Runner:
    """One backend's copy of a workload in one mode (see the module docstring)."""

    def __init__(self, backend, workload, mode, device, compile_backend=None):
        self.backend, self.mode = backend, mode
        self.device = device
        model = copy.deepcopy(workload.model).to(device)
        self.inputs = tuple(t.to(device) for t in workload.inputs)
        fn = workload.loss if mode == "train" else workload.infer
        if fn is None:
            raise ValueError(f"model {workload.name!r} has no {mode} mode")
        if mode == "train":
            model.train()
            self.opt = torch.optim.AdamW(model.parameters(), lr=LR)
            self._opt_step = self.opt.step
        else:
            model.eval()
        self.model = model
        call = model
        if compile_backend is not None:
            call = torch.compile(model, backend=compile_backend)
            if mode == "train":
                self._opt_step = torch.compile(self.opt.step, backend=compile_backend)
        self._fn = fn
        self._call = call

    def step(self):
        if self.mode == "train":
            loss = self._fn(self._call, *self.inputs)
            loss.backward()
            self._opt_step()
            self.opt.zero_grad(set_to_none=True)
            return loss.detach()
        with torch.no_grad():
            return self._fn(self._call, *self.inputs)

    def finish(self):
        pass

    @staticmethod
    def to_cpu(t):
        """`t` (or a tuple of results, flattened and concatenated) as CPU float64."""
        if isinstance(t, (tuple, list)):
            return torch.cat([x.detach().to("cpu").double().reshape(-1) for x in t])
        return t.detach().to("cpu").double()


class _EmberRunner(Runner):
    def finish(self):
        import ember

        ember.sync()


class _XlaRunner(Runner):
    def finish(self):
        import torch_xla
        import torch_xla.core.xla_model as xm

        torch_xla.sync()
        xm.wait_device_ops()


def make_runner(backend: str, workload, mode: str) -> Runner:
    """A Runner of `workload` in `mode` ("train" or "inference") on `backend`.

    Raises RuntimeError with the reason when the backend is unavailable here."""
    reason = unavailable_reason(backend)
    if reason:
        raise RuntimeError(f"backend {backend}: {reason}")
    if backend == "eager":
        return Runner(backend, workload, mode, torch.device("cpu"))
    if backend == "inductor":
        return Runner(backend, workload, mode, torch.device("cpu"), compile_backend="inductor")
    if backend == "ember":
        import ember

        return _EmberRunner(backend, workload, mode, ember.device())
    if backend == "ember_compile":
        return Runner(backend, workload, mode, torch.device("cpu"), compile_backend="ember")
    import torch_xla

    cache = os.environ.get("EMBER_BENCH_XLA_CACHE")
    if cache:  # XLA's persistent compilation cache (what a warm start can reuse)
        import torch_xla.runtime as xr

        xr.initialize_cache(cache, readonly=False)
    return _XlaRunner(backend, workload, mode, torch_xla.device())
