"""Ember's benchmark against the anchors: eager CPU, ``torch.compile`` (Inductor),
PyTorch/XLA, JAX — step time, compile time, warm start, memory, with a numerics check.

Run it as ``python -m ember.bench --help``. Modules (one idea each): ``models`` (the
workloads), ``backends`` (the runners), ``timing`` (interleaved timing phase and the
numerics check), ``cost`` (fresh cold/warm processes) and ``worker`` (their entry point),
``ceilings`` (STREAM triad, ATen GEMM), ``machine`` (what the run ran on), ``xla`` (the
optional PyTorch/XLA column), ``jax_column`` and ``jax_worker`` (the optional JAX/XLA:CPU
column for the MLP), ``profile`` (``--profile``: torch.profiler tables), ``report``
(JSON, markdown), ``plot`` (PNG), ``cli``.
Method and setup: docs/benchmarks.md.
"""
