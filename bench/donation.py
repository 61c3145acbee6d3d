"""Donation on against off: one ember.bench model's training step with
``ember.config.donate_buffers`` switched round by round, paired in one process.

Each round runs, for each setting in alternating order, one warm-up step (the
setting's own program) and then 3 steps timed to ``finish()``; the printed ratio is
the median over rounds of (on / off) within a round. ``ROUNDS`` (environment,
default 16) sets the rounds.

    python bench/donation.py [SCALE] [MODEL]     # defaults: full mlp
"""

import os
import statistics
import sys
import time

import ember
from ember.bench import backends, models

scale = sys.argv[1] if len(sys.argv) > 1 else "full"
name = sys.argv[2] if len(sys.argv) > 2 else "mlp"
w = models.build(name, scale)
r = backends.make_runner("ember", w, "train")
for _ in range(3):
    r.step()
    r.finish()
t = {True: [], False: []}
for i in range(int(os.environ.get("ROUNDS", "16"))):
    for d in (True, False) if i % 2 == 0 else (False, True):
        ember.config.donate_buffers = d
        r.step()  # the setting's own program
        r.finish()
        t0 = time.perf_counter()
        for _ in range(3):
            r.step()
        r.finish()
        t[d].append((time.perf_counter() - t0) / 3 * 1e3)
ratios = [a / b for a, b in zip(t[True], t[False])]
print(
    f"{name} {scale} train: donate on {statistics.median(t[True]):.2f} ms, "
    f"off {statistics.median(t[False]):.2f} ms, "
    f"on/off paired median {statistics.median(ratios):.3f} (load {os.getloadavg()[0]:.1f})"
)
print("donated_buffers", ember.metrics.counters().get("donated_buffers"))
