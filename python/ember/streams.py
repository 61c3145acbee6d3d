"""Streams and events of the ember device (``torch.ember.Stream``, ``Event``,
``current_stream()``, ``stream(s)``), for code written against ``torch.cuda``'s API,
FSDP2 first (docs/architecture.md, "Past one machine").

The ember device has one stream: programs run in sync order on one execution queue
(docs/architecture.md, "Execution model"), and collectives run on the issuing thread after
the programs computing their inputs. Every ``Stream`` object therefore names that one
in-order stream: ``wait_stream``/``wait_event`` have nothing to wait for (all earlier work
is already ahead in the one order), and ``priority`` is recorded but orders nothing. The
host-side waits are real: ``Stream.synchronize()``, ``Event.synchronize()`` and
``query()`` wait until every program queued so far has run (``ember.synchronize()``), the
only completion ember can report.
"""

import threading

import torch


def _synchronize():
    from . import _C

    _C.sync("torch.ember stream/event synchronize()", True)


class Stream:
    """An ember stream (the device's one in-order stream). ``priority`` as in
    ``torch.cuda.Stream`` (an int; lower is higher priority), kept, not used."""

    def __init__(self, device=None, priority=0, **kwargs):
        if device is not None and torch.device(device).type != "ember":
            raise ValueError(f"torch.ember.Stream: not an ember device: {device}")
        self.device = torch.device("ember", 0)
        self.priority = int(priority)

    def wait_stream(self, stream):
        """Work issued after this call runs after `stream`'s: always true on one stream."""

    def wait_event(self, event):
        """Work issued after this call runs after `event`'s: always true on one stream."""

    def record_event(self, event=None):
        event = Event() if event is None else event
        event.record(self)
        return event

    def query(self):
        _synchronize()
        return True

    def synchronize(self):
        _synchronize()

    def __eq__(self, other):
        return isinstance(other, Stream)  # every ember stream is the one stream

    def __hash__(self):
        return hash("ember-stream")

    def __repr__(self):
        return f"torch.ember.Stream(device={self.device}, priority={self.priority})"


class Event:
    """An ember event: marks a point in the device's one stream."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        self.enable_timing = enable_timing

    def record(self, stream=None):
        """Marks the work issued so far (as ``torch.cuda.Event.record``, returns None)."""

    def wait(self, stream=None):
        """Work issued after this call runs after the event's: always true."""

    def query(self):
        _synchronize()
        return True

    def synchronize(self):
        _synchronize()

    def elapsed_time(self, end_event):
        raise RuntimeError(
            "torch.ember.Event.elapsed_time(): ember events carry no timestamps; time a "
            "step with ember.sync() and time.perf_counter()"
        )


_current = threading.local()
_DEFAULT = []  # the default stream, made on first use (after the device is named ember)


def default_stream(device=None):
    if not _DEFAULT:
        _DEFAULT.append(Stream())
    return _DEFAULT[0]


def current_stream(device=None):
    return getattr(_current, "stream", None) or default_stream()


def set_stream(stream):
    _current.stream = stream


class stream:  # torch.cuda.stream's name
    """``with torch.ember.stream(s):`` makes `s` the current stream (``None``: unchanged)."""

    def __init__(self, stream):
        self.stream = stream

    def __enter__(self):
        self.prev = current_stream()
        if self.stream is not None:
            set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc):
        set_stream(self.prev)
        return False
