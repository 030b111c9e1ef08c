"""What the mirror knows of a source partition it can no longer hear.

While the link is cut (or the source region is down) the mirror cannot read the source's
end. What it has is the last source end it saw, *when* it saw it, and how fast that end
grew before. Three figures follow, each labelled for what it is:

* **lag, a lower bound**: last known source end - mirrored end, *as of* the last answer.
  The source's end never goes back, so the true lag is at least this;
* **seconds since the source was last heard**: now - the wall time of that answer;
* **lag, an estimate**: the lower bound + the last known produce rate x those seconds.
  An estimate, not a bound: the writers may have slowed down, stopped or sped up when
  the link went down; it is right when they kept their pace.

The produce rate is the growth of the source's high watermark across consecutive fetch
answers over the last ``window_ms`` (10 s): (newest end - oldest end) / their time apart.
Samples closer than ``spacing_ms`` replace the newest, so a busy partition keeps about a
hundred. A high watermark that goes back (a new source leader whose high watermark lags
for a moment) starts the window over. Sans-IO: wall time is an argument.
"""

from __future__ import annotations

from collections import deque

RATE_WINDOW_MS = 10_000
MIN_SPAN_MS = 500  # a rate from samples closer than this is noise
SAMPLE_SPACING_MS = 100


class SourceEndHistory:
    def __init__(self, *, window_ms: int = RATE_WINDOW_MS, min_span_ms: int = MIN_SPAN_MS,
                 spacing_ms: int = SAMPLE_SPACING_MS) -> None:
        self.window_ms = window_ms
        self.min_span_ms = min_span_ms
        self.spacing_ms = spacing_ms
        self._samples: deque[tuple[int, int]] = deque()  # (wall ms, source end), oldest first
        self._seeded_rate: float | None = None

    def seed(self, rate_per_s: float | None) -> None:
        """The rate a previous mirror process last reported (its status file): used until
        this one has seen the source long enough to measure its own."""
        self._seeded_rate = rate_per_s

    def observe(self, wall_ms: int, end: int) -> None:
        samples = self._samples
        if samples and end < samples[-1][1]:
            samples.clear()
        if len(samples) >= 2 and samples[-1][0] - samples[-2][0] < self.spacing_ms:
            samples[-1] = (wall_ms, end)  # the newest slides until it is spacing_ms past the one before
        else:
            samples.append((wall_ms, end))
        horizon = wall_ms - self.window_ms
        while len(samples) > 2 and samples[1][0] <= horizon:
            samples.popleft()

    def rate_per_s(self) -> float | None:
        """Records per second the source end grew at over the window (the last known rate
        while the source is not heard: no sample arrives then); None: not measured yet."""
        if len(self._samples) >= 2:
            (t0, e0), (t1, e1) = self._samples[0], self._samples[-1]
            if t1 - t0 >= self.min_span_ms:
                return (e1 - e0) * 1000 / (t1 - t0)
        return self._seeded_rate


def lag_estimate(lag_lower_bound: int | None, rate_per_s: float | None, silent_ms: int) -> int | None:
    """The lower bound plus what the source took at ``rate_per_s`` in ``silent_ms`` (an
    estimate; None when either is unknown)."""
    if lag_lower_bound is None or rate_per_s is None:
        return None
    return lag_lower_bound + round(rate_per_s * max(0, silent_ms) / 1000)
