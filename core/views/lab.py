"""The Lab's views: a lab record (lab.json, written by `core.studies.lab`) in, Views out.

    list_labs() / load_lab(id)      the stored labs, newest first, and one of them (checked)
    labs_table(labs)                the stored labs: factors, seeds, status, runs done
    grid_view(lab) / grid_text(lab) one row per cell: levels, parameters, held-out loss, the mid-depth mean
                                    cosine (raw and centred), top-1/median, sink share, the excluded runs
    curves_view(lab)                the mid-depth mean cosine over training steps, one curve per cell (log x)
    effects_view(lab, statistic)    the main effects: one bar per factor contrast with its 95% interval
    claims_view(lab)                the three claims the lab answers, verdict, numbers, interval
    papers_claims(labs)             the Papers page's block: each claim from the newest finished lab that has
                                    its factor, or "not tested" and how to test it

Every number is read from the record; nothing is recomputed here (the intervals over seeds, the effects and
the verdicts are the lab's: core/studies/lab.py). A statistic that does not apply to a cell (attention sinks of
a model without attention) says "not applicable" and why, never a blank.

The reader: lab records live in `<cache_dir>/labs/<lab_id>.json`; core/studies/lab.py owns the format and its one
reader, `load_lab` (which checks a record: a file on disk is input like any other). `list_labs` here lists them for
the page, with their times and a note for each file that could not be read.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import pandas as pd

from .. import __version__
from ..base.errors import InputError
from ..studies.lab import check_lab, labs_dir, load_lab  # noqa: F401 - the page's reader is the lab's own
from ..studies.selection import LAB_ID
from . import figures as F
from .common import View
from .dynamics import log_step_axis

VERDICTS = ("supported", "not supported", "inconclusive", "not tested")
CLAIM_IDS = ("non_transformer_anisotropic", "coupled_adam_lowers", "gate_removes_massive")
# The factor a claim needs, and how to run a lab that tests it (the Papers page's "not tested" rows).
CLAIM_FACTOR = {"non_transformer_anisotropic": "arch", "coupled_adam_lowers": "optimizer",
                "gate_removes_massive": "gate"}
CLAIM_TEXT = {"non_transformer_anisotropic": "A non-Transformer trained identically is anisotropic",
              "coupled_adam_lowers": "Coupled Adam lowers anisotropy",
              "gate_removes_massive": "The attention gate removes massive activations"}
HOW_TO_TEST = {"arch": "--factor arch=gpt2,mamba,rwkv,lstm --seeds 3",
               "optimizer": "--factor arch=gpt2 --factor optimizer=adamw,coupled-adam --seeds 3",
               "gate": "--factor gate=off,on --seeds 3"}
# The statistics of a cell's summary the grid shows (core.studies.lab's SCALARS): (column, label, the record's names
# for it, the first one found is read).
GRID_STATS = (
    ("held_out_loss", "held-out loss", ("held_out_loss",)),
    ("mid_mean_cosine", "mean cosine (mid-depth)", ("mid_mean_cosine",)),
    ("mid_centred_mean_cosine", "centred mean cosine (mid-depth)", ("mid_centred_mean_cosine",)),
    ("mid_input_shared", "shared at the input (mid-depth: raw − centred)", ("mid_input_shared",)),
    ("max_massive_ratio", "top-1/median (largest over layers)", ("max_massive_ratio",)),
    ("mid_outlier_dims", "outlier dims (mid-depth)", ("mid_outlier_dims",)),
    ("mid_sink_share", "sink share (mid-depth)", ("mid_sink_share",)),
    ("sink_rate", "sink rate (heads with α₁ > 0.3)", ("sink_rate",)),
    ("embedding_mean_cosine", "input embedding matrix: mean cosine of its rows", ("embedding_mean_cosine",)),
)
STAT_LABELS = {"mid_mean_cosine": "mid-depth mean cosine", "mid_centred_mean_cosine": "mid-depth centred mean cosine",
               "mid_input_shared": "mid-depth part shared at the input",
               "max_massive_ratio": "top-1/median (largest over layers)", "mid_outlier_dims": "mid-depth outlier dims",
               "mid_sink_share": "mid-depth sink share", "sink_rate": "sink rate",
               "held_out_loss": "held-out loss (nats/token)",
               "embedding_mean_cosine": "input embedding matrix: mean cosine of its rows"}


# ----------------------------------------------------------------------------- the reader
def list_labs(cache_dir: str | Path | None = None) -> tuple[list[dict], list[str]]:
    """(the stored labs, newest first, each with "id" and "mtime"; a note per file that could not be read)."""
    folder = labs_dir(cache_dir)
    try:
        files = [(p.stat().st_mtime, p) for p in folder.glob("*.json") if LAB_ID.fullmatch(p.stem)]
    except OSError:
        return [], []
    labs, notes = [], []
    for mtime, p in sorted(files, key=lambda t: (-t[0], t[1].name)):
        try:
            labs.append({**load_lab(p.stem, cache_dir), "mtime": mtime})
        except InputError as e:
            notes.append(str(e))
    return labs, notes


# ----------------------------------------------------------------------------- small readers of a record
def _num(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def factors_text(lab: dict) -> str:
    """"arch: gpt2, mamba × optimizer: adamw, sgd"."""
    return " × ".join(f"{k}: {', '.join(map(_level, v))}" for k, v in lab["spec"]["factors"].items()) or "no factor"


def _level(v) -> str:
    return ("on" if v else "off") if isinstance(v, bool) else str(v)


def runs_of(lab: dict) -> list[dict]:
    return [r for c in lab["cells"] for r in c["runs"]]


def lab_summary(lab: dict) -> dict:
    """id, status, factors, seeds, cells, runs (done of all) of a lab: its row in the list."""
    runs = runs_of(lab)
    seeds = lab["spec"].get("seeds") or []
    return {"lab": lab.get("id", ""), "status": str(lab.get("status", "?")), "factors": factors_text(lab),
            "seeds": len(seeds), "cells": len(lab["cells"]),
            "runs done": f"{sum(r.get('status') == 'done' for r in runs)} of {len(runs)}",
            "steps": (lab["spec"].get("base") or {}).get("steps")}


def plural(n, word: str, many: str | None = None) -> str:
    """"1 seed", "3 seeds", "4 families" (plural(4, "family", "families"))."""
    return f"{n} {word if n == 1 else many or word + 's'}"


def lab_label(lab: dict) -> str:
    """"lab-1 · done · arch: gpt2, mamba · 3 seeds": a lab in the picker."""
    s = lab_summary(lab)
    return f"{s['lab']} · {s['status']} · {s['factors']} · {plural(s['seeds'], 'seed')}"


def _manifest(lab: dict, view: str, params: dict | None = None) -> dict:
    return {"app": "anisotropy-workbench", "core_version": __version__, "view": view,
            "params": {"lab": lab.get("id"), "spec": lab["spec"], "status": lab.get("status"), **(params or {})},
            "runs": [], "lab_runs": [r.get("run") for r in runs_of(lab) if r.get("run")]}


def _subtitle(lab: dict) -> str:
    base = lab["spec"].get("base") or {}
    seeds = lab["spec"].get("seeds") or []
    size = f"{base.get('n_layers', '?')} layers × d={base.get('d_model', '?')}" if base else ""
    steps = f"{base['steps']:,} steps" if isinstance(base.get("steps"), int) else ""
    bits = [f"lab {lab.get('id', '')}", factors_text(lab), f"{len(seeds)} seed{'s' if len(seeds) != 1 else ''}",
            size, steps, f"on {base['corpus']}" if base.get("corpus") else "", f"status: {lab.get('status', '?')}"]
    return " · ".join(b for b in bits if b)


def _stat(summary: dict, names: Sequence[str]) -> dict | None:
    for n in names:
        s = summary.get(n)
        if isinstance(s, dict):
            return s
    return None


def interval_text(s: dict | None, digits: int = 3) -> str:
    """"0.452 [0.431, 0.473] (n=3)", "0.452 (no interval: 1 seed)", or "—"."""
    if not s or _num(s.get("mean")) is None:
        return "—"
    m, lo, hi, n = _num(s.get("mean")), _num(s.get("lo")), _num(s.get("hi")), s.get("n")
    if lo is None or hi is None:
        return f"{m:.{digits}g} (no interval: {n if n is not None else '?'} seed{'s' if n != 1 else ''})"
    return f"{m:.{digits}g} [{lo:.{digits}g}, {hi:.{digits}g}] (n={n})"


def not_applicable_why(cell: dict, key: str) -> str | None:
    """Why `key` (a statistic, with or without its "mid_"/"max_" prefix) does not apply to the cell's runs, if it does
    not (the runs' "not_applicable": {"sink_share": "Mamba has no attention", ...})."""
    bare = key.split("_", 1)[1] if key.startswith(("mid_", "max_")) else key
    for r in cell["runs"]:
        na = r.get("not_applicable") or {}
        why = na.get(bare) or na.get(key)
        if why:
            return str(why)
    s = (cell.get("summary") or {}).get(key) or (cell.get("summary") or {}).get(bare)
    if isinstance(s, dict) and s.get("not_applicable"):
        return str(s["not_applicable"])
    return None


def _params(cell: dict) -> dict:
    return next((r["params"] for r in cell["runs"] if isinstance(r.get("params"), dict)), {})


def cell_state(cell: dict) -> str:
    """"done", "running" (some runs pending), "pending" (none done), or what its runs ended as."""
    st = [r.get("status", "pending") for r in cell["runs"]]
    if st and all(s == "done" for s in st):
        return "done"
    if st and all(s == "pending" for s in st):
        return "pending"
    if "pending" in st:
        return f"{st.count('done')} of {len(st)} runs done"
    return ", ".join(f"{st.count(s)} {s}" for s in dict.fromkeys(st))


def crossings(lab: dict, cell: dict) -> dict[str, dict]:
    """threshold -> {"steps": [first step of each learned seed, None: never], "crossed": k, "n": n}: the summary's
    (core.studies.lab), else read from the learned runs."""
    got = (cell.get("summary") or {}).get("first_crossing")
    if isinstance(got, dict) and all(isinstance(v, dict) for v in got.values()):
        return got
    runs = _learned_done(cell)
    out = {}
    for t in lab["spec"].get("thresholds") or []:
        k = f"{float(t):g}"
        steps = [(r.get("first_crossing") or {}).get(k) for r in runs]
        out[k] = {"steps": steps, "crossed": sum(x is not None for x in steps), "n": len(steps)}
    return out


def crossing_text(c: dict) -> str:
    """"step 16 (3 of 3 seeds; 16, 16, 32)", "never (0 of 3 seeds)", or "—" (no learned run)."""
    n, steps = c.get("n") or 0, [x for x in c.get("steps") or [] if isinstance(x, (int, float))]
    if not n:
        return "—"
    if not steps:
        return f"never (0 of {plural(n, 'seed')})"
    med = sorted(steps)[(len(steps) - 1) // 2]
    each = ", ".join(f"{int(x):,}" for x in c.get("steps") or [] if isinstance(x, (int, float)))
    return f"step {int(med):,} ({len(steps)} of {plural(n, 'seed')}" + (f"; {each})" if len(steps) > 1 else ")")


def _excluded_text(cell: dict) -> str:
    return "; ".join(f"seed {e.get('seed')}: {e.get('why', '')}" for e in cell.get("excluded") or [])


# ----------------------------------------------------------------------------- the list and the grid
def labs_table(labs: Sequence[dict]) -> View:
    rows = [lab_summary(lab) for lab in labs]
    return View("lab_list", "The stored labs", None, pd.DataFrame(rows),
                {"app": "anisotropy-workbench", "core_version": __version__, "view": "lab_list",
                 "params": {"labs": [r["lab"] for r in rows]}, "runs": []},
                caption="Newest first. A lab is one job: its runs are ordinary cached trainings.")


def grid_view(lab: dict) -> View:
    """One row per cell, numbers only (the CSV): the levels, parameter counts, each statistic's mean and 95%
    interval over the learned seeds (lo/hi empty with one seed), why a statistic does not apply, the excluded runs."""
    factors = list(lab["spec"]["factors"])
    rows = []
    for c in lab["cells"]:
        p = _params(c)
        row = {"cell": c.get("cell", ""), **{f: _level(c["levels"].get(f)) for f in factors}, "state": cell_state(c),
               "params_total": p.get("total"), "params_non_embedding": p.get("non_embedding")}
        summary = c.get("summary") or {}
        for col, _, names in GRID_STATS:
            s = _stat(summary, names) or {}
            row[col] = _num(s.get("mean"))
            row[f"{col}_lo"], row[f"{col}_hi"] = _num(s.get("lo")), _num(s.get("hi"))
            row[f"{col}_n"] = s.get("n")
            row[f"{col}_not_applicable"] = not_applicable_why(c, col) or ""
        for t, cr in crossings(lab, c).items():
            steps = [x for x in cr.get("steps") or [] if isinstance(x, (int, float))]
            row[f"first_crossing_{t}_median_step"] = sorted(steps)[(len(steps) - 1) // 2] if steps else None
            row[f"first_crossing_{t}_crossed"], row[f"first_crossing_{t}_n"] = cr.get("crossed"), cr.get("n")
        row["excluded"] = _excluded_text(c)
        rows.append(row)
    return View("lab_grid", "The grid: one row per cell", None, pd.DataFrame(rows), _manifest(lab, "lab_grid"),
                caption="Mean over the seeds whose run learned (held-out loss below the unigram entropy), with a 95% "
                        "t-interval over seeds; excluded runs are listed with why. Mid-depth: " +
                        str(lab["spec"].get("mid_layer") or "the layer at relative depth 0.5") + ".")


def grid_text(lab: dict) -> pd.DataFrame:
    """The grid as a person reads it (a cell by its levels): each statistic as "mean [lo, hi] (n)", "not applicable:
    why", or "—"."""
    factors = list(lab["spec"]["factors"])
    rows = []
    for c in lab["cells"]:
        p = _params(c)
        tot, ne = p.get("total"), p.get("non_embedding")
        row = {**{f: _level(c["levels"].get(f)) for f in factors}, "state": cell_state(c),
               "parameters (total / non-embedding)": f"{tot:,} / {ne:,}" if isinstance(tot, int) and isinstance(ne, int)
               else "—"}
        summary = c.get("summary") or {}
        for col, label, names in GRID_STATS:
            why = not_applicable_why(c, col)
            s = _stat(summary, names)
            row[label] = f"not applicable: {why}" if why and (s is None or _num(s.get("mean")) is None) \
                else interval_text(s, 4 if col == "held_out_loss" else 3)
        for t, cr in crossings(lab, c).items():
            row[f"mean cosine first ≥ {t}"] = crossing_text(cr)
        row["excluded runs"] = _excluded_text(c) or "none"
        rows.append(row)
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- curves over steps
def _series_style(lab: dict) -> dict[str, tuple[int, str]]:
    """cell -> (colour index, dash): colour by the first factor's level, dash by the other factors' levels."""
    factors = list(lab["spec"]["factors"])
    dashes = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
    out, others = {}, []
    for c in lab["cells"]:
        first = factors[0] if factors else None
        levels = list(map(_level, lab["spec"]["factors"][first])) if first else []
        rest = tuple(_level(c["levels"].get(f)) for f in factors[1:])
        if rest not in others:
            others.append(rest)
        lv = _level(c["levels"].get(first)) if first else ""
        out[c.get("cell", "")] = (levels.index(lv) if lv in levels else 0, dashes[others.index(rest) % len(dashes)])
    return out


def _learned_done(cell: dict) -> list[dict]:
    excluded = {e.get("seed") for e in cell.get("excluded") or []}
    return [r for r in cell["runs"] if r.get("status") == "done" and r.get("learned", True) is not False
            and r.get("seed") not in excluded and r.get("steps") and r.get("mid_mean_cosine_by_step")]


def curves_view(lab: dict) -> View:
    """The mid-depth mean cosine at every analysed checkpoint, one curve per cell (the mean over its learned seeds),
    the band: the range over those seeds; log step axis (step 0 drawn at 0.5)."""
    style = _series_style(lab)
    series, rows, notes, all_steps = [], [], [], set()
    for c in lab["cells"]:
        runs = _learned_done(c)
        name = c.get("cell", "")
        if not runs:
            why = "no run finished yet" if cell_state(c) != "done" else "no run learned (each is listed as excluded)"
            notes.append(f"{name}: no curve ({why}).")
            continue
        steps = sorted(set.intersection(*(set(r["steps"]) for r in runs)))
        by_run = [dict(zip(r["steps"], r["mid_mean_cosine_by_step"])) for r in runs]
        vals = [[_num(b.get(s)) for b in by_run] for s in steps]
        keep = [i for i, v in enumerate(vals) if all(x is not None for x in v)]
        steps, vals = [steps[i] for i in keep], [vals[i] for i in keep]
        if not steps:
            notes.append(f"{name}: no curve (no step with a value in every seed).")
            continue
        all_steps.update(steps)
        mean = [sum(v) / len(v) for v in vals]
        colour, dash = style[name]
        seeds = [r.get("seed") for r in runs]
        s = {"name": f"{name} ({len(runs)} seed{'s' if len(runs) != 1 else ''})", "x": [max(x, 0.5) for x in steps],
             "y": mean, "color": colour, "dash": dash,
             "hover": [f"{F.esc(name)}<br>step {st:,}: {m:.4f}" + (f" (seeds {min(v):.4f} to {max(v):.4f})"
                                                                     if len(v) > 1 else "")
                       for st, m, v in zip(steps, mean, vals)]}
        if len(runs) > 1:
            s["band"] = ([min(v) for v in vals], [max(v) for v in vals])
            s["band_name"] = None
        series.append(s)
        rows += [{"cell": name, **{k: _level(v) for k, v in c["levels"].items()}, "step": st, "seed": sd,
                  "mid_mean_cosine": x} for st, v in zip(steps, vals) for sd, x in zip(seeds, v)]
    title = "Mid-depth mean cosine over training, one curve per cell"
    if not series:
        return View("lab_curves", title, None, pd.DataFrame(rows), _manifest(lab, "lab_curves"),
                    caption="No curve yet: no cell has a finished run that learned.", notes=notes)
    fig = F.line_chart(series, title=title, subtitle=F.esc(_subtitle(lab) + " · band: the range over seeds"),
                       x_title="training step (log; 0 shown at 0.5)", y_title="mean cosine at mid-depth")
    log_step_axis(fig, sorted(all_steps))
    return View("lab_curves", title, fig, pd.DataFrame(rows), _manifest(lab, "lab_curves"),
                caption="Each curve: the mean over the cell's seeds whose run learned; the shaded band spans those "
                        "seeds' values (min to max). Runs that did not learn are left out (the grid lists them).",
                notes=notes)


# ----------------------------------------------------------------------------- main effects
def effect_statistics(lab: dict) -> list[str]:
    """The statistics the lab's effects are computed for, in the record's order."""
    return list(dict.fromkeys(str(e.get("statistic")) for e in lab.get("effects") or [] if e.get("statistic")))


def stat_label(key: str) -> str:
    return STAT_LABELS.get(key, key.replace("_", " "))


def effects_view(lab: dict, statistic: str | None = None) -> View:
    """One bar per factor contrast (the change of `statistic` from one level to the other, averaged over the other
    factors), its error bar the 95% interval over seeds; with one seed, no error bar and "no interval: 1 seed"."""
    stats = effect_statistics(lab)
    statistic = statistic or (stats[0] if stats else "mid_mean_cosine")
    effects = [e for e in lab.get("effects") or [] if e.get("statistic") == statistic]
    rows = [{"factor": e.get("factor"), "from": _level(e.get("from")), "to": _level(e.get("to")),
             "statistic": statistic, "delta": _num(e.get("delta")), "lo": _num(e.get("lo")), "hi": _num(e.get("hi")),
             "n": e.get("n"), "averaged_over": "; ".join(f"{k}: {', '.join(map(_level, v))}"
                                                          for k, v in (e.get("averaged_over") or {}).items()),
             "note": str(e.get("note") or "")}
            for e in effects]
    label = stat_label(statistic)
    title = f"Main effects on the {label}"
    if not any(r["delta"] is not None for r in rows):
        why = "the lab has no effect yet (a factor needs two levels with finished runs)" if stats \
            else "this lab has no main effects (one cell, or no finished run yet)"
        return View(f"lab_effects_{statistic}", title, None, pd.DataFrame(rows), _manifest(lab, "lab_effects"),
                    caption=f"No effect to draw: {why}.", notes=[f"No effect to draw: {why}."])
    # a contrast of the first factor takes its target level's colour in the curves (gpt2 → mamba: mamba's); the
    # other factors' levels are dashes there, so their bars are grey
    factors = list(lab["spec"]["factors"])
    first_levels = list(map(_level, lab["spec"]["factors"][factors[0]])) if factors else []
    items = []
    for e, r in zip(effects, rows):
        if r["delta"] is None:
            continue
        same = factors and e.get("factor") == factors[0] and r["to"] in first_levels
        has = r["lo"] is not None and r["hi"] is not None
        n = r["n"]
        items.append({"name": f"{e.get('factor')}:\n{_level(e.get('from'))} → {_level(e.get('to'))}",
                      "value": r["delta"], "lo": r["lo"], "hi": r["hi"],
                      "label": f"{r['delta']:+.3g}\n[{r['lo']:+.2g}, {r['hi']:+.2g}]" if has
                      else f"{r['delta']:+.3g}\n(no interval:\n{plural(n, 'seed')})",
                      "hover": f"n = {plural(n, 'seed')}; averaged over {r['averaged_over'] or 'no other factor'}"
                               + (f"; {r['note']}" if r["note"] else ""),
                      "color": first_levels.index(r["to"]) if same else "#8c8c8c"})
    fig = F.interval_bars(items, title=title, subtitle=F.esc(_subtitle(lab) + " · error bar: 95% interval over seeds"),
                          y_title=f"Δ {F.esc(label)}")
    return View(f"lab_effects_{statistic}", title, fig, pd.DataFrame(rows), _manifest(lab, "lab_effects",
                                                                                    {"statistic": statistic}),
                caption="Each bar: the change from the first level to the second, averaged over the other factors' "
                        "levels; the error bar is the 95% t-interval over seeds. Computed by the lab, not typed.")


# ----------------------------------------------------------------------------- the claims
def _claim_rows(claims: Sequence[dict]) -> list[dict]:
    rows = []
    for c in claims:
        d, lo, hi = _num(c.get("delta")), _num(c.get("lo")), _num(c.get("hi"))
        rows.append({"claim": c.get("claim") or CLAIM_TEXT.get(c.get("id"), c.get("id", "")),
                     "verdict": c.get("verdict", "not tested"), "numbers": c.get("numbers", ""),
                     "delta [95% interval]": "—" if d is None else f"{d:+.3g}" + (f" [{lo:+.3g}, {hi:+.3g}]"
                                                                                if lo is not None and hi is not None
                                                                                else " (no interval)"),
                     "why": c.get("why", "")})
    return rows


def claims_view(lab: dict) -> View:
    rows = _claim_rows(lab.get("claims") or [])
    return View("lab_claims", "The claims this lab answers", None, pd.DataFrame(rows), _manifest(lab, "lab_claims"),
                caption="Verdicts computed from the lab's numbers (rules in core/studies/lab.py): a verdict reads the "
                        "interval, not the mean alone.")


def _has_factor(lab: dict, factor: str) -> bool:
    return len((lab["spec"]["factors"] or {}).get(factor) or []) > 1


def papers_claims(labs: Sequence[dict]) -> View:
    """The three lab claims for the Papers page: each from the newest finished lab (labs: newest first) whose grid
    has the claim's factor and that tested the claim (else the newest with the factor, whose verdict says why not);
    "not tested", with the command that tests it, when no finished lab has the factor."""
    done = [lab for lab in labs if lab.get("status") == "done"]
    rows, used = [], []
    for cid in CLAIM_IDS:
        factor = CLAIM_FACTOR[cid]
        found = [(x, c) for x in done if _has_factor(x, factor)
                 for c in x.get("claims") or [] if isinstance(c, dict) and c.get("id") == cid]
        lab, claim = next(((x, c) for x, c in found if c.get("verdict") != "not tested"), found[0] if found
                          else (None, None))
        if claim is None:
            rows.append({"claim": CLAIM_TEXT[cid], "verdict": "not tested",
                         "numbers": "", "delta [95% interval]": "—",
                         "why": f"not tested: run the lab with {HOW_TO_TEST[factor]} (or the Lab page)", "lab": ""})
            continue
        rows.append({**_claim_rows([claim])[0], "lab": lab.get("id", "")})
        used.append(lab.get("id"))
    n = sum(r["verdict"] != "not tested" for r in rows)
    return View("papers_lab_claims", "Is anisotropy inherent to Transformers? (the lab)", None, pd.DataFrame(rows),
                {"app": "anisotropy-workbench", "core_version": __version__, "view": "papers_lab_claims",
                 "params": {"labs": list(dict.fromkeys(used))}, "runs": []},
                caption=f"{n} of {len(rows)} claims tested by controlled training (same data, tokens, budget and "
                        "seeds; one factor changed at a time). Each comes from the newest finished lab with its factor.")
