"""Conformance sweep: PyTorch's own OpInfo database run on the ember device.

``python -m ember.conformance [--ops PATTERN] [--dtypes ...] [--backward] [--json FILE]
[--markdown FILE] [--check-expected FILE]`` runs every OpInfo entry
(``torch.testing._internal.common_methods_invocations.op_db``) that supports a dtype on
CPU, on every sample input it yields, on ember and on eager CPU, and compares them with
the tolerances of PyTorch's own device-vs-CPU test. Modules:

- ``_ops``: the op set, dtype support, entries whose values are not comparable;
- ``_run``: one (op, dtype, direction) item, sample by sample;
- ``_compare``: tolerances and the comparison;
- ``_worker`` / ``_driver``: items run in worker subprocesses (crash and hang isolation);
- ``_report``: the JSON report, summary and Markdown;
- ``_expected``: the expected-failure file and its checker.

See docs/conformance.md for the current figures and how to reproduce them.
"""

from ._cli import main  # noqa: F401
