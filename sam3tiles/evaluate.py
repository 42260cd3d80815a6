"""Object-level evaluation: predictions against truth, per class, at IoU >= 0.5."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import shapely

from .wording import spoken

IOU_MATCH = 0.5
log = logging.getLogger(__name__)


def _match(pred: np.ndarray, truth: np.ndarray, iou_min: float):
    """Greedy one-to-one matching by IoU. Returns (pairs [(p, t, iou)], iou of every candidate pair)."""
    if len(pred) == 0 or len(truth) == 0:
        return [], (np.zeros(0, int), np.zeros(0, int), np.zeros(0))
    tree = shapely.STRtree(truth)
    p, t = tree.query(pred, predicate="intersects")
    inter = shapely.area(shapely.intersection(pred[p], truth[t]))
    union = shapely.area(pred[p]) + shapely.area(truth[t]) - inter
    iou = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
    order = np.argsort(-iou, kind="stable")
    used_p, used_t, pairs = set(), set(), []
    for k in order:
        if iou[k] < iou_min:
            break
        if p[k] in used_p or t[k] in used_t:
            continue
        used_p.add(p[k])
        used_t.add(t[k])
        pairs.append((int(p[k]), int(t[k]), float(iou[k])))
    return pairs, (p, t, iou, inter)


def evaluate_class(pred_geoms, truth_geoms, iou_min: float = IOU_MATCH) -> dict:
    pred = np.asarray([g for g in pred_geoms if g is not None and not g.is_empty], dtype=object)
    truth = np.asarray([g for g in truth_geoms if g is not None and not g.is_empty], dtype=object)
    pairs, cand = _match(pred, truth, iou_min)
    tp = len(pairs)
    fp, fn = len(pred) - tp, len(truth) - tp
    matched_p = {a for a, _, _ in pairs}
    duplicates = fragments = 0
    if len(cand[0]):
        p, t, iou, inter = cand
        dup = {int(a) for a, v in zip(p, iou) if v >= iou_min and int(a) not in matched_p}
        duplicates = len(dup)
        pred_area = shapely.area(pred[p])
        inside = np.divide(inter, pred_area, out=np.zeros_like(inter), where=pred_area > 0) >= 0.5
        counts = np.bincount(t[inside], minlength=len(truth))
        fragments = int((counts >= 2).sum())
    precision = tp / len(pred) if len(pred) else (1.0 if not len(truth) else 0.0)
    recall = tp / len(truth) if len(truth) else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"truth": len(truth), "pred": len(pred), "tp": tp, "fp": fp, "fn": fn, "precision": precision,
            "recall": recall, "f1": f1, "mean_iou": float(np.mean([v for _, _, v in pairs])) if pairs else 0.0,
            "duplicates": duplicates, "fragments": fragments}


def evaluate(pred, truth, class_col: str = "class", pred_class_col: str = "prompt",
             iou_min: float = IOU_MATCH) -> pd.DataFrame:
    """Per-class precision, recall, F1 at IoU >= iou_min, mean IoU of matches, duplicates, fragments.

    `pred` and `truth` are GeoDataFrames; truth is reprojected to pred's CRS, or pred to truth's when
    pred is in lon/lat (an RFC 7946 GeoJSON) and truth is projected: overlaps are measured in a plane.
    Classes are compared case-insensitively; a frame without its class column is one class.
    """
    if truth.crs is not None and pred.crs is not None and truth.crs != pred.crs:
        if pred.crs.is_geographic and not truth.crs.is_geographic:
            pred = pred.to_crs(truth.crs)
        else:
            truth = truth.to_crs(pred.crs)
    pc = pred[pred_class_col].astype(str).str.lower() if pred_class_col in pred.columns else pd.Series(
        ["all"] * len(pred), index=pred.index)
    tc = truth[class_col].astype(str).str.lower() if class_col in truth.columns else pd.Series(
        ["all"] * len(truth), index=truth.index)
    if class_col not in truth.columns or pred_class_col not in pred.columns:
        pc = pd.Series(["all"] * len(pred), index=pred.index)
        tc = pd.Series(["all"] * len(truth), index=truth.index)
    if len(pc) and len(tc) and not set(pc) & set(tc):
        log.warning(spoken(_unmet(set(pc), set(tc), truth, class_col)))
    rows = []
    for cls in sorted(set(tc) | set(pc)):
        r = evaluate_class(pred.geometry[pc == cls].values, truth.geometry[tc == cls].values, iou_min)
        rows.append({"class": cls, **r})
    return pd.DataFrame(rows)


def _unmet(prompts: set, classes: set, truth, class_col: str) -> str:
    """Why every class scores 0: no prompt is a class of the truth (a box-prompt run's prompts are
    `visual`). Names both, and a truth column that holds the prompts when one does."""
    def some(values: set) -> str:
        shown = sorted(values)[:8]
        return ", ".join(shown) + (f" and {len(values) - len(shown)} more" if len(values) > len(shown) else "")

    texts = [c for c in truth.columns if c not in (class_col, truth.geometry.name)
             and (pd.api.types.is_object_dtype(truth[c]) or pd.api.types.is_string_dtype(truth[c]))]
    holds = [c for c in texts if prompts & set(truth[c].dropna().astype(str).str.lower())]
    # `evaluate`'s own option, not a run's: spelled for both its doors here
    fix = (f"its column {holds[0]!r} holds them: --class-col {holds[0]} (class_col={holds[0]!r} in Python)"
           if holds else "name the truth column that holds the prompts with --class-col NAME (class_col= in "
           "Python), or give the truth the prompts as its class values")
    return (f"no prompt of the predictions is a class of the truth, so every object scores as a miss: prompts "
            f"({some(prompts)}), classes in truth column {class_col!r} ({some(classes)}); {fix}")


def format_table(df: pd.DataFrame) -> str:
    cols = ["class", "truth", "pred", "tp", "fp", "fn", "precision", "recall", "f1", "mean_iou", "duplicates",
            "fragments"]
    return df[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}")
