"""What a benchmark run ran on: machine, software versions, Ember commit and backend.

``info()`` returns a JSON-ready dict: CPU model, logical cores, torch threads, memory,
load average, Python/torch/transformers versions, the Ember repository commit (``git
describe``-style, with ``-dirty`` when the work tree differs), the ember extension in use,
and the Ember execution backend (``ember.config.backend`` where the bridge has it, else
``$EMBER_BACKEND``, else the bridge's default).
"""

from __future__ import annotations

import datetime
import os
import platform
import subprocess

import torch


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_gib() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def commit(path: str) -> str | None:
    """`git rev-parse --short HEAD` of the repository holding `path` (+"-dirty" when
    tracked files differ from HEAD); None outside a git checkout."""
    try:
        head = subprocess.run(
            ["git", "-C", path, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        if head.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "-C", path, "status", "--porcelain", "-uno"],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout.strip()
        return head.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def ember_backend() -> str:
    """The execution backend ember runs graphs with (see the module docstring)."""
    try:
        import ember

        b = getattr(ember.config, "backend", None)
        if b is not None:
            return str(b)
    except Exception:  # noqa: BLE001 - reported through the backend's own status
        pass
    return os.environ.get("EMBER_BACKEND") or "default"


def info() -> dict:
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        import transformers

        tf_version = transformers.__version__
    except ImportError:
        tf_version = None
    ext = ember_version = None
    try:
        import ember

        ext = getattr(ember._C, "__file__", None)
        ember_version = ember.__version__
    except Exception:  # noqa: BLE001
        pass
    return {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "cpu_model": _cpu_model(),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "memory_gib": _mem_gib(),
        "load_average_start": list(os.getloadavg()),
        "python": platform.python_version(),
        "torch_version": torch.__version__,
        "ember_version": ember_version,
        "transformers_version": tf_version,
        "commit": commit(here),
        "ember_backend": ember_backend(),
        "ember_extension": ext,
    }
