"""Padding a varying dim to a few fixed sizes (docs/architecture.md, "Recompiles").

A graph is compiled per shape: a loop whose sequence length changes every step compiles a
graph per length. ``pad_to_bucket`` pads the varying dim up to the next of a few sizes, so
the loop compiles one graph per bucket, and returns the mask of the real positions for the
model to ignore the padding (an attention mask, a loss mask).
"""

import torch


def pad_to_bucket(x: torch.Tensor, dim: int, buckets, value=0):
    """``(padded, mask)``: ``x`` padded with ``value`` along ``dim`` to the smallest of
    ``buckets`` that holds it, and a bool mask of that length, True at ``x``'s own
    positions, on ``x``'s device.

    Pad a CPU batch before moving it to the device (the padding then runs eagerly, on the
    host). An ember tensor is padded through the host as well (one value read), so that
    the padding itself never compiles a graph per length. Raises ``ValueError`` when no
    bucket holds the dim.
    """
    dim = dim % x.dim()
    n = x.shape[dim]
    sizes = sorted(int(b) for b in buckets)
    fits = [b for b in sizes if b >= n]
    if not fits:
        raise ValueError(
            f"pad_to_bucket: dim {dim} of size {n} exceeds the largest bucket {sizes[-1]}"
        )
    b = fits[0]
    device = x.device
    host = x if device.type == "cpu" else x.cpu()
    if b == n:
        padded = host
    else:
        shape = list(host.shape)
        shape[dim] = b - n
        padded = torch.cat([host, host.new_full(shape, value)], dim)
    mask = torch.arange(b) < n
    if device.type != "cpu":
        padded, mask = padded.to(device), mask.to(device)
    return padded, mask
