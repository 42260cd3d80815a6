"""Rule 5's boundary model on long straight sides (`sam3tiles.merge.smooth`, issue 49): a straight stretch of an
outline (a field strip's side, a road) gets a window longer than `REACH_CELLS` while the chords of its window
turn by so little that the average's offset on that arc stays under `BIAS_CELLS`; a bent outline (a meander, a
kink, a corner) keeps the windows it had."""

from __future__ import annotations

import numpy as np
from scipy import ndimage

from sam3tiles.merge.smooth import smooth_ring
from sam3tiles.vectorize.pieces import MASK_CELL


def _field(n: int, rng, length_cells: float, step: float) -> np.ndarray:
    """A smooth random displacement of standard deviation one mask cell, correlated over `length_cells`
    cells, at `n` points `step` px apart (as `misbehaving`'s wobble draws it)."""
    knots = int(n * step / (length_cells * MASK_CELL)) + 4
    f = ndimage.zoom(rng.normal(0, 1, knots), n / knots * 1.0, order=3)[:n]
    return MASK_CELL * np.clip(f / f.std(), -2, 2)


def _strip(rng, long_px=3000.0, wide_px=180.0, angle=0.3):
    """A straight strip (a rotated rectangle) whose four sides wobble: its ring and its true sides' lines."""
    step = 2.0
    xs = np.arange(0, long_px + step / 2, step)
    ys = np.arange(0, wide_px + step / 2, step)
    bottom = np.column_stack([xs, _field(len(xs), rng, 12, step)])
    right = np.column_stack([long_px + _field(len(ys), rng, 12, step), ys])
    top = np.column_stack([xs[::-1], wide_px + _field(len(xs), rng, 12, step)])
    left = np.column_stack([_field(len(ys), rng, 12, step), ys[::-1]])
    ring = np.vstack([bottom[:-1], right[:-1], top[:-1], left[:-1]])
    ring = np.vstack([ring, ring[:1]])
    c, s = np.cos(angle), np.sin(angle)
    return ring @ np.array([[c, s], [-s, c]]), (c, s)


def _long_side_error(ring: np.ndarray, rot, long_px=3000.0, wide_px=180.0, margin=200.0) -> float:
    """RMS distance of the ring's points on its two long sides (away from the corners) from the true sides."""
    c, s = rot
    back = ring @ np.array([[c, -s], [s, c]])
    x, y = back[:, 0], back[:, 1]
    on = (x > margin) & (x < long_px - margin)
    err = np.where(y < wide_px / 2, y, y - wide_px)[on]
    return float(np.sqrt(np.mean(err ** 2)))


def test_a_long_straight_side_is_smoothed_over_more_than_the_base_reach():
    # noise of one cell correlated over 12 cells: a window of +-29 cells leaves ~0.45 cell of it; the straight
    # side allows the longer window, which leaves less (seeds drawn here, each one alone)
    before, after = [], []
    for seed in range(6):
        ring, rot = _strip(np.random.default_rng(100 + seed))
        before.append(_long_side_error(ring, rot))
        after.append(_long_side_error(smooth_ring(ring, MASK_CELL), rot))
    assert np.mean(before) > 0.8 * MASK_CELL
    assert np.mean(after) < 0.33 * MASK_CELL, (np.mean(before) / MASK_CELL, np.mean(after) / MASK_CELL)


def test_a_kinked_outline_is_moved_no_more_than_with_the_base_reach(monkeypatch):
    # a clean zigzag band (a river of straight reaches 120 px long, kinks of 0.3 rad): the chords of a long window
    # turn too much for the long reach to engage; the moves stay what the base reach makes them (within 10 %)
    import sam3tiles.merge.smooth as smooth

    ring = _kinked()

    def moved() -> float:
        out = smooth_ring(ring, MASK_CELL)
        assert np.abs(out - ring).max() < smooth.CAP_CELLS * MASK_CELL + 1e-9  # the cap holds
        return float(np.sqrt(np.mean(np.sum((out - ring) ** 2, axis=1))))

    now = moved()
    monkeypatch.setattr(smooth, "LONG_REACH_CELLS", smooth.REACH_CELLS)
    assert now <= 1.1 * moved()


def _plain_windows(p, reach, first, long_reach):
    """`_windows` as first written: both chords by np.roll at every size."""
    from sam3tiles.merge.smooth import BIAS_CELLS, NOISE_RUN_CELLS, SHARP, STEP_CELLS, TURN, _cone, _runs_over

    n, top = len(p), max(reach, long_reach)
    half, alive = np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool)
    size = max(1, first)
    while size <= min(top, n // 3) and alive.any():
        a = p - np.roll(p, size, axis=0)
        b = np.roll(p, -size, axis=0) - p
        cos = (a * b).sum(axis=1) / np.maximum(np.hypot(a[:, 0], a[:, 1]) * np.hypot(b[:, 0], b[:, 1]), 1e-300)
        if size <= reach:
            alive &= cos >= np.cos(TURN)
        else:
            turn = 6 * BIAS_CELLS / (size * STEP_CELLS)
            bent, sharp = cos < np.cos(min(TURN, turn)), cos < np.cos(min(TURN, SHARP * turn))
            alive &= ~(_runs_over(bent, int(NOISE_RUN_CELLS / STEP_CELLS)) | sharp)
        half[alive] = size
        size += max(1, size // 4)
    return _cone(np.minimum(half, top))


def test_windows_one_chord_a_size_equal_the_plain_form():
    from sam3tiles.merge.smooth import _windows

    rng = np.random.default_rng(7)
    for k in range(120):
        n = int(rng.integers(8, 2500))
        t = np.linspace(0, 2 * np.pi, n, endpoint=False)
        r = 100 + rng.normal(0, 1, n).cumsum() * rng.uniform(0, 2)
        p = np.column_stack([r * np.cos(t) * rng.uniform(0.2, 5), r * np.sin(t)])
        if k % 3 == 0:
            p = np.round(p)  # a pixel staircase, repeated points
        if k % 5 == 0:
            p[5:9] = p[5]
        for args in ((58, 34, 200), (58, 34, 58), (10, 3, 50)):
            assert np.array_equal(_windows(p, *args), _plain_windows(p, *args))


def test_noise_alone_does_not_cut_a_straight_sides_long_window():
    # on a straight strip's wobbly sides the chords of a long window turn by the noise's doing now and then, a
    # short stretch at a time (`NOISE_RUN_CELLS`): most points keep the whole long reach (median window over 90
    # cells each way; one bend-like stretch of noise used to cut the windows of its whole neighbourhood)
    from sam3tiles.merge.smooth import LONG_REACH_CELLS, MIN_CELLS, REACH_CELLS, STEP_CELLS, _windows

    for seed in range(6):
        ring, _ = _strip(np.random.default_rng(100 + seed))
        s = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(ring, axis=0).T))])
        n = int(np.ceil(s[-1] / (STEP_CELLS * MASK_CELL)))
        t = np.arange(n) * (s[-1] / n)
        p = np.column_stack([np.interp(t, s, ring[:, 0]), np.interp(t, s, ring[:, 1])])
        half = _windows(p - p.mean(axis=0), int(REACH_CELLS / STEP_CELLS), int(round(MIN_CELLS / STEP_CELLS)),
                        int(LONG_REACH_CELLS / STEP_CELLS)) * STEP_CELLS
        assert np.median(half) > 90, (seed, np.median(half))


def _kinked() -> np.ndarray:
    """A clean zigzag band's ring (a river of straight reaches 120 px long, kinks of 0.3 rad), points 2 px apart."""
    import shapely

    pts = [(0.0, 0.0)]
    ang = 0.0
    for k in range(40):
        ang += 0.3 if k % 2 == 0 else -0.3
        pts.append((pts[-1][0] + 120 * np.cos(ang), pts[-1][1] + 120 * np.sin(ang)))
    ring = np.asarray(shapely.LineString(pts).buffer(25, quad_segs=4, join_style="mitre").exterior.coords)
    return np.asarray(shapely.segmentize(shapely.LineString(ring), 2.0).coords)


def test_windows_found_at_every_other_point_stop_where_those_at_every_point_do():
    # `_ring_windows` tests the chords at every other point (half the CPU), the points between taking their
    # neighbours': at corners, kinks and straight stretches the windows are of the same kind (none, under
    # `MIN_CELLS`, up to `REACH_CELLS`, longer; or within two points) as those found at every point, at 99 % of
    # the points or more
    from sam3tiles.merge.smooth import LONG_REACH_CELLS, MIN_CELLS, REACH_CELLS, STEP_CELLS, _ring_windows, _windows

    kind = [1, int(round(MIN_CELLS / STEP_CELLS)), int(REACH_CELLS / STEP_CELLS) + 1]
    rings = [_strip(np.random.default_rng(100 + seed))[0] for seed in range(6)] + [_kinked()]
    for ring in rings:
        _, _, (px, py), half = _ring_windows(ring, MASK_CELL)
        every = _windows(np.column_stack([px, py]), int(REACH_CELLS / STEP_CELLS), int(round(MIN_CELLS / STEP_CELLS)),
                         int(LONG_REACH_CELLS / STEP_CELLS))
        alike = (np.digitize(half, kind) == np.digitize(every, kind)) | (np.abs(half - every) <= 2)
        assert np.mean(alike) >= 0.99
        assert abs(int((half == 0).sum()) - int((every == 0).sum())) <= 0.05 * (every == 0).sum() + 2
        assert (np.abs(np.diff(np.append(half, half[0]))) <= 1).all()  # (a window grows by a point at most)


def test_runs_over_keeps_only_the_long_runs_around_the_ring():
    from sam3tiles.merge.smooth import _runs_over

    rng = np.random.default_rng(3)
    for _ in range(500):
        n = int(rng.integers(1, 50))
        flag, k = rng.random(n) < rng.random(), int(rng.integers(0, 8))
        want = np.zeros(n, dtype=bool)
        for i in np.flatnonzero(flag):  # the run through i, around the ring
            a = b = 0
            while a < n and flag[(i - a - 1) % n]:
                a += 1
            while b < n and flag[(i + b + 1) % n]:
                b += 1
            want[i] = flag.all() or a + b + 1 > k
        assert np.array_equal(_runs_over(flag, k), want | (flag & flag.all()))


def _plain_runs_over(flag, k):
    """`_runs_over` point by point: a flagged point stays where its run (around the ring) is over `k` long."""
    n, out = len(flag), np.zeros(len(flag), dtype=bool)
    if flag.all():
        return flag.copy()
    for i in np.flatnonzero(flag).tolist():
        lo = hi = i
        while flag[(lo - 1) % n]:
            lo -= 1
        while flag[(hi + 1) % n]:
            hi += 1
        out[i] = hi - lo + 1 > k
    return out


def test_runs_over_equal_the_plain_form():
    from sam3tiles.merge.smooth import _runs_over

    rng = np.random.default_rng(11)
    for _ in range(1500):
        n = int(rng.integers(1, 300))
        flag = rng.random(n) < rng.random()
        k = int(rng.integers(0, 25))
        assert np.array_equal(_runs_over(flag, k), _plain_runs_over(flag, k)), (n, k)
