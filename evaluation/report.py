"""report.md, metrics.json values, the terminal summary and the PNG plots of an offline evaluation
(docs/evaluation.md#report). Plots draw on matplotlib's Agg canvas (`Figure`, imported lazily): no pyplot state."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from evaluation.endpoints import figure_at
from evaluation.figures import Comparison, HeldOutSource, KeyFigures, SplitSummary
from evaluation.policies import BREAKDOWN_POLICIES, POLICIES

PLOTS = {"quality": "quality_vs_cloud_share.png", "domain": "misroute_by_domain.png", "reliability": "reliability.png"}
BREAKDOWNS = {
    "domain": "domain group",
    "source": "source",
    "precision": "declared precision",
    "length": "prompt length",
}


def num(x, fmt: str = ".3f") -> str:
    """`x` in format `fmt`; "—" for a missing figure (None, NaN)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return format(0.0 if abs(x) < 1e-12 else x, fmt)  # no "-0.0%" from float round-off


def pct(x) -> str:
    return num(x, ".1%")


def table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table; the first column left-aligned, the rest right-aligned."""
    lines = ["| " + " | ".join(header) + " |", "| --- |" + " ---: |" * (len(header) - 1)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def show(path: str, fmt: str = ".3f"):
    """A column's cell: the figure at the dotted `path` (attributes or keys; "—" if missing) in format `fmt`."""

    def cell(value) -> str:
        for key in path.split("."):
            value = value.get(key) if isinstance(value, dict) else getattr(value, key, None)
        return num(value, fmt)

    return cell


def columns_table(first: str, items, columns) -> str:
    """A Markdown table, a row per (name, value) of `items`: the name, then a cell per (header, cell) of `columns`."""
    return table(
        [first, *(head for head, _ in columns)], [[name, *(cell(v) for _, cell in columns)] for name, v in items]
    )


def policy_table(figures: Comparison, columns) -> str:
    """A row per policy compared (its PolicyFigures), a cell per column."""
    return columns_table("policy", ((POLICIES[name].label, p) for name, p in figures.policies.items()), columns)


def misroute_cell(p: KeyFigures) -> str:
    """ "total (under / over)": the misroute rate and its two halves."""
    return f"{pct(p.misroute_rate)} ({pct(p.under_routing)} / {pct(p.over_routing)})"


def headline_columns(figures: Comparison) -> list:
    """Policies at their operating point, at the learned router's cloud share, and over the curve."""
    share = pct(figures.matched_cloud_share)
    return [
        ("cloud share", show("cloud_share", ".1%")),
        ("misroute (under / over)", misroute_cell),
        ("quality", show("quality")),
        ("vs all-cloud", show("quality_vs_all_cloud", "+.3f")),
        ("with fallback", show("quality_with_fallback")),
        (f"quality at {share} cloud", show("at_matched_share.quality")),
        (f"PGR at {share}", show("at_matched_share.pgr")),
        (f"misroute at {share}", show("at_matched_share.misroute_rate", ".1%")),
        ("APGR", show("apgr")),
        ("CPT(50%)", show("cpt50", ".1%")),
        ("CPT(80%)", show("cpt80", ".1%")),
    ]


def cost_latency_columns(figures: Comparison) -> list:
    first = next(iter(figures.policies.values()))
    prices, devices = list(first.cost), list(first.latency)
    return [
        ("expected cloud calls", show("expected_cloud_calls", ".1%")),
        *((f"$/request ({c})", lambda p, c=c: f"{p.cost[c].per_request:.5f}") for c in prices),
        *((f"cost reduction vs all-cloud ({c})", show(f"cost.{c}.reduction_vs_all_cloud", ".1%")) for c in prices),
        *(
            (f"latency {d} mean / p95 (ms)", lambda p, d=d: f"{p.latency[d].mean_ms:.0f} / {p.latency[d].p95_ms:.0f}")
            for d in devices
        ),
    ]


FALLBACK_COLUMNS = [
    ("fallback-zone share", show("fallback_share", ".1%")),
    ("fallback fires (per request)", show("fallback_fires", ".1%")),
    ("fires per fallback-zone request", show("fallback_fires_in_zone", ".1%")),
    ("quality recovered", show("fallback_recovered_quality", "+.3f")),
]


def breakdown_table(groups: dict[str, SplitSummary]) -> str:
    names = [n for n in BREAKDOWN_POLICIES if n in next(iter(groups.values())).policies]
    ranked = [n for n in ("learned", "reference") if n in names]  # the APGR to beat next to the router's
    columns = [
        ("rows", lambda g: str(g.population.rows)),
        ("cloud needed", show("population.cloud_needed_share", ".1%")),
        ("learned cloud share", show("policies.learned.cloud_share", ".1%")),
        *((f"{POLICIES[n].short} misroute (under / over)", lambda g, n=n: misroute_cell(g.policies[n])) for n in names),
        *((f"{POLICIES[n].short} APGR", show(f"policies.{n}.apgr")) for n in ranked),
    ]
    return columns_table("group", groups.items(), columns)


def loso_table(loso: dict[str, HeldOutSource]) -> str:
    learned = "figures.policies.learned"
    columns = [
        ("rows", lambda r: str(r.figures.population.rows)),
        ("trained on", lambda r: f"{r.trained_on_rows} rows"),
        ("learned APGR", show(f"{learned}.apgr")),
        ("learned AUC", show(f"{learned}.auc")),
        ("cloud share", show(f"{learned}.cloud_share", ".1%")),
        ("misroute (under / over)", lambda r: misroute_cell(r.figures.policies["learned"])),
        ("quality vs all-cloud", show(f"{learned}.quality_vs_all_cloud", "+.3f")),
        (
            "with fallback vs all-cloud",
            lambda r: num(
                r.figures.policies["learned"].quality_with_fallback - r.figures.population.all_cloud_quality, "+.3f"
            ),
        ),
        ("reference APGR", show("figures.policies.reference.apgr")),
        ("hand rule APGR", show("figures.policies.rule_table.apgr")),
        ("in-distribution APGR", show("in_distribution_apgr")),
    ]
    rows = [
        [source, "—", "—", f"failed: {r.error}", *["—"] * 8]
        if r.figures is None
        else [source, *(cell(r) for _, cell in columns)]
        for source, r in loso.items()
    ]
    return table(["held-out source", *(head for head, _ in columns)], rows)


def render(metrics: dict) -> str:
    """The whole report.md: headline table first, then the details (on logs where no request
    has both outcomes: the off-policy estimates alone)."""
    if "figures" not in metrics:
        return render_off_policy_only(metrics)
    if "endpoints" in metrics["setup"]:
        return render_endpoints(metrics)
    f: Comparison = metrics["figures"]
    setup, split, population = metrics["setup"], metrics["setup"]["split"], f.population
    parts = [
        f"# Offline evaluation of {setup['model_version']}",
        f"Bundle `{setup['bundle']}`; logs {', '.join(f'`{p}`' for p in setup['logs'])}: {setup['rows_read']} rows "
        f"read, {setup['rejected']} rejected (listed in rejects.jsonl), {setup['prompts']} distinct prompts "
        f"({_pairs(setup['rows_per_split'], '{k} {v}')}).",
        f"Split `{split}`: {population.rows} requests ({setup['split_note']}); cloud needed on "
        f"{pct(population.cloud_needed_share)}. All-edge quality {num(population.all_edge_quality)}, all-cloud "
        f"{num(population.all_cloud_quality)}, oracle {num(population.oracle_quality)}. Matched cloud share = the "
        f"learned router's cloud-first share, {pct(f.matched_cloud_share)}. Fallback catch rate "
        f"{setup['catch_rate']}.",
        policy_table(f, headline_columns(f)),
        "## Cost and latency\n\nExpectations under the cost model (edge "
        f"${setup['cost']['edge']:g} a request, cloud {_pairs(setup['cost']['cloud'], '${v:g} ({k})')}) and the "
        f"latency model (edge {_pairs(setup['latency']['edge_ms'], '{v:g} ms ({k})')}, cloud "
        f"{setup['latency']['cloud_ms']:g} ms + {setup['latency']['network_ms']:g} ms network; a fired fallback "
        "pays edge, then cloud).",
        policy_table(f, cost_latency_columns(f)),
        "## Fallback\n\n" + _fallback_text(population.fallback_rates, setup["catch_rate"]),
        policy_table(f, FALLBACK_COLUMNS),
        "## Acceptance check\n\n" + _acceptance_text(metrics.get("acceptance") or {}),
        "## Calibration of the learned probabilities\n\nPer probability the router outputs: the mean "
        "prediction in each bin against the mean observed outcome (quality, or the cloud-needed label).",
        *(_calibration_text(name, reliability) for name, reliability in metrics["calibration"].items()),
        "## Tuned rule table",
        _tuned_text(metrics["tuned_rule_table"]),
        "## Reference",
        _reference_text(metrics.get("reference") or {"skipped": "not requested"}),
    ]
    if metrics.get("novelty"):
        parts += ["## Unfamiliar prompts", _novelty_text(metrics["novelty"], metrics.get("leave_one_source_out"))]
    for dimension, title in BREAKDOWNS.items():
        parts += [f"## By {title}", breakdown_table(metrics["breakdowns"][dimension])]
    loso = metrics.get("leave_one_source_out")
    if loso:
        parts += [
            "## Leave-one-source-out (traffic shift)\n\nA router trained on every other source (same "
            "settings as the bundle), evaluated on all rows of the held-out source; in-distribution APGR "
            f"is the bundle's on that source's `{split}` rows.",
            loso_table(loso),
        ]
    if metrics.get("off_policy"):
        parts += ["## Logged traffic (off-policy)", off_policy_text(metrics["off_policy"])]
    if metrics.get("rules"):
        parts += ["## Policy rules", rules_text(metrics["rules"])]
    parts += ["## Policies", "\n".join(f"- **{POLICIES[n].label}**: {POLICIES[n].description}" for n in f.policies)]
    if metrics.get("notes"):
        parts += ["## Notes", "\n".join(f"- {n}" for n in metrics["notes"])]
    parts += ["## Plots", *(f"![{name}]({file})" for name, file in PLOTS.items())]
    return "\n\n".join(parts) + "\n"


def _calibration_text(name: str, reliability: dict) -> str:
    bins = [
        [f"{b['lo']:.1f}-{b['hi']:.1f}", str(b["rows"]), num(b["mean_score"]), num(b["observed_rate"])]
        for b in reliability["bins"]
    ]
    return (
        f"**{name}**: expected calibration error {num(reliability['ece'], '.4f')} over {len(bins)} non-empty bins.\n\n"
        + table(["bin", "rows", "mean prediction", "observed"], bins)
    )


def render_endpoints(metrics: dict) -> str:
    """report.md of an N-endpoint bundle's evaluation (evaluation.endpoints.bundle_figures)."""
    setup, figures = metrics["setup"], metrics["figures"]
    lines = [
        f"# N-endpoint bundle {setup['model_version']}",
        "",
        f"{figures['rows']} {setup['split']} rows of {', '.join(setup['logs']) or 'the logs'}, "
        f"{figures['complete_rows']} with every endpoint's outcome; routed by the SDK (serving.Router.route_batch).",
        "",
    ]
    if "router" in figures:
        router, cascade, best = figures["router"], figures["cascade"], figures["best_single"]
        shown = [
            ("**the bundle's first endpoint**", router),
            *(
                (f"`{name}` alone" + (" (best single)" if name == best else ""), f)
                for name, f in figures["single"].items()
            ),
            ("oracle", figures["oracle"]),
            (f"the whole cascade (catch rate {cascade['catch_rate']:g})", cascade),
        ]
        low, high = router["quality_minus_best_single_ci95"]
        lines += [
            table(
                ["on the complete rows", "quality", "cost / request"],
                [[n, f"{f['quality']:.4f}", f"${f['cost']:.5f}"] for n, f in shown],
            ),
            "",
            f"Quality minus the best single endpoint: {num(router['quality_minus_best_single'], '+.4f')} "
            f"[{num(low, '+.4f')}, {num(high, '+.4f')}] (95%, over the rows); cost saved: "
            f"{pct(router['cost_saved_vs_best_single'])}.",
        ]
    lines += ["", "First calls: " + ", ".join(f"`{n}` {pct(s)}" for n, s in figures["shares"].items()) + "."]
    lines.append(f"Unfamiliar prompts: {pct(figures['unfamiliar_share'])}.")
    if "logged" in figures:
        logged = figures["logged"]["router"]
        lines.append(
            f"One-outcome rows ({figures['logged']['rows']}): the bundle's choices' SNIPS quality "
            f"{num(logged['quality'], '.4f')} on {logged['effective_rows']:.0f} effective rows."
        )
    if "acceptance" in metrics:
        a = metrics["acceptance"]
        lines.append(
            f"Acceptance check on {a['rows']} logged answers: AUC {num(a['auc'])}, catch rate "
            f"{num(a['catch_rate'])}, false rejects {num(a['false_reject_rate'])}."
        )
    return "\n".join(lines) + "\n"


def render_off_policy_only(metrics: dict) -> str:
    setup = metrics["setup"]
    parts = [
        f"# Off-policy evaluation of {setup['model_version']}",
        f"Bundle `{setup['bundle']}`; logs {', '.join(f'`{p}`' for p in setup['logs'])}: {setup['rows_read']} "
        f"rows read, {setup['rejected']} rejected or waiting for an outcome (rejects.jsonl). Split `{setup['split']}`.",
        off_policy_text(metrics.get("off_policy")),
    ]
    if metrics.get("notes"):
        parts += ["## Notes", "\n".join(f"- {n}" for n in metrics["notes"])]
    return "\n\n".join(parts) + "\n"


def _left_out_text(ope: dict) -> str:
    """The requests left out below the propensity floor (evaluation.run.logged_traffic), or ""."""
    left = ope.get("below_min_propensity")
    if not left:
        return ""
    ids = ", ".join(f"`{i}`" for i in left["request_ids"])
    more = f" (the first {len(left['request_ids'])})" if left["rows"] > len(left["request_ids"]) else ""
    return f"\n\n{left['rows']} logged requests left out, the lowest: {left['reason']}. Request ids{more}: {ids}."


def _ci(interval) -> str:
    return f"[{num(interval[0])}, {num(interval[1])}]" if interval else "—"


def off_policy_text(ope: dict | None) -> str:
    if not ope:
        return "No logged request carries the side it ran on, its propensity and its outcome."
    if "skipped" in ope:
        return f"Skipped: {ope['skipped']}." + _left_out_text(ope)
    q = ope["quality"]
    rows = [[name.upper(), num(q[name]["estimate"]), _ci(q[name]["ci95"])] for name in ("ips", "snips", "dr")]
    m = ope["misroute_rate"]["model_completed"]
    return (
        f"{ope['requests']} logged requests (side that ran first, its propensity, its outcome). The bundle "
        f"picks the logged side on {pct(ope['agreement'])} of them. Logging policy, observed: quality "
        f"{num(ope['logging_policy']['quality'])}, cloud-first share {pct(ope['logging_policy']['cloud_share'])}."
        "\n\n"
        + table(["estimator", "bundle's quality (first answer)", "95% interval"], rows)
        + f"\n\nThe bundle's cloud-first share on these prompts: {pct(ope['cloud_share']['exact'])} (its own "
        f"decisions, exact). Misroute rate {pct(m['estimate'])} (95% {_ci(m['ci95'])}), exact on the "
        f"{ope['misroute_rate']['both_outcomes_known']} requests with both outcomes, completed with the bundle's "
        f"heads elsewhere. Assumptions: {ope['assumptions']}." + _left_out_text(ope)
    )


RULE_COLUMNS = [
    ("action", lambda r: f"{r['action']} {r['endpoint']}"),
    ("requests", lambda r: str(r["requests"])),
    ("share", show("share", ".1%")),
    ("zone changes", lambda r: _pairs(r["zone_changes"], "{k} {v}") or "none"),
]
EFFECT_COLUMNS = [
    ("without rules", show("without_rules", ".4f")),
    ("with rules", show("with_rules", ".4f")),
    ("difference", lambda f: f"{f['difference']:+.4f} [{f['interval'][0]:+.4f}, {f['interval'][1]:+.4f}]"),
]


def rules_text(effect: dict) -> str:
    """The policy file's rules on these requests (evaluation.rules_effect)."""
    given = _pairs(effect["metadata"], "{k}={v}") if effect["metadata"] else "none"
    closed = effect["no_feasible_endpoint"]
    lines = [
        f"Policy `{effect['source']}` (version {effect['version']}) applied after the learned router, as the SDK "
        f"applies it, to {effect['rows']} requests (request metadata: {given}). {effect['no_rule']} were left to "
        f"the model; {closed['requests']} have no endpoint left (the SDK raises NoFeasibleEndpoint)"
        + (f": {_pairs(closed['by_rules'], '{k} {v}')}." if closed["by_rules"] else "."),
        columns_table("rule", effect["rules"].items(), RULE_COLUMNS),
    ]
    if "figures" in effect:
        lines += [
            f"On the {effect['servable_rows']} servable requests, the model's zones against the rules' (paired per "
            "request; 95% normal interval of the mean difference):",
            columns_table("figure", effect["figures"].items(), EFFECT_COLUMNS),
        ]
    lines += [f"- {note}" for note in effect["notes"]]
    return "\n\n".join(lines)


def _fallback_text(rates: dict, catch_rate: float) -> str:
    measured, assumed = rates["measured_rows"], rates["assumed_rows"]
    text = (
        "In the fallback zone the edge answers first; when its answer is rejected, the cloud answers. "
        "Edge-zone requests are not checked. "
    )
    if measured:
        text += (
            f"For the {measured} evaluated requests whose edge answer is in the logs, the rejection is the "
            "bundle's acceptance check's verdict on that answer: failures it catches are recovered, and good "
            "answers it rejects cost a cloud call (measured). "
        )
    if assumed:
        text += (
            f"For the other {assumed} requests there is no answer to check, and a catch rate of {catch_rate} "
            "with no false rejects is assumed."
        )
    return text


def _acceptance_text(acceptance: dict) -> str:
    if not acceptance.get("model"):
        return f"The bundle has no acceptance model: {acceptance.get('reason', 'unknown reason')}."
    if not acceptance.get("rows"):
        return f"Not measured: {acceptance.get('reason')}."
    rows = [
        [source, str(a["rows"]), str(a["failures"]), num(a["auc"]), pct(a["catch_rate"]), pct(a["false_reject_rate"])]
        for source, a in [("all", acceptance), *acceptance["per_source"].items()]
    ]
    return (
        f"The bundle's learned check, through the SDK, on the evaluated split's logged edge answers: accept "
        f"when P(good) >= {acceptance['threshold']:.3f} (chosen in training for "
        f"{pct(acceptance['false_reject_rate_target'])} false rejects). Catch rate = failures rejected; "
        "false-reject rate = good answers rejected.\n\n"
        + table(["source", "answers", "failures", "AUC", "catch rate", "false-reject rate"], rows)
        + _assumption_text(acceptance.get("assumption_check"))
        + ("\n\n![acceptance ROC](acceptance_roc.png)" if acceptance.get("roc") else "")
    )


def _assumption_text(check: dict | None) -> str:
    if not check:
        return ""
    m, a = check["measured"], check["assumed"]
    return (
        f"\n\nOn the {check['rows']} requests whose answer was checked, the learned router's quality with "
        f"fallback is {num(m['quality_with_fallback'])} with {pct(m['expected_cloud_calls'])} expected cloud calls "
        f"(the fallback fires on {pct(m['fallback_fires'])} of them); the assumed catch rate would have claimed "
        f"{num(a['quality_with_fallback'])} with {pct(a['expected_cloud_calls'])} "
        f"({pct(a['fallback_fires'])})."
    )


def _novelty_text(novelty: dict, loso: dict[str, HeldOutSource] | None) -> str:
    groups = [
        f"{name}: {g['rows']} rows, quality {num(g['quality'])} (all-edge {num(g['all_edge_quality'])}, "
        f"all-cloud {num(g['all_cloud_quality'])})"
        for name in ("unfamiliar", "familiar")
        if (g := novelty.get(name))
    ]
    shifted = [
        f"{source} {pct(r.unfamiliar_share)}" for source, r in (loso or {}).items() if r.unfamiliar_share is not None
    ]
    return (
        f"{pct(novelty['unfamiliar_share'])} of the evaluated prompts are unfamiliar to the router. "
        + "; ".join(groups)
        + "."
        + (f" Held-out sources (leave-one-source-out routers): {', '.join(shifted)}." if shifted else "")
    )


def _pairs(values: dict, fmt: str) -> str:
    return ", ".join(fmt.format(k=k, v=v) for k, v in values.items())


def _tuned_text(tuned: dict) -> str:
    if "skipped" in tuned:
        return f"Skipped: {tuned['skipped']}"
    w = tuned["weights"]
    return (
        f"Weights: long prompt {w['long_prompt']:.2f}, finance/medical/legal {w['rule_domain']:.2f}, exact "
        f"precision {w['exact_precision']:.2f} (sum capped at 1); edge below {tuned['lo']:.3f}, cloud above "
        f"{tuned['hi']:.3f}, fallback in between. Fitted on {tuned['fit']['rows']} train-split rows for the "
        f"bundle's target `{tuned['target']}` (met: {tuned['fit']['met_target']})."
    )


def _reference_text(reference: dict) -> str:
    if "skipped" in reference:
        return f"Skipped: {reference['skipped']}"
    rows = reference["trained_on_rows"]
    left_out = f", {rows['without_text']} rows without text left out" if rows.get("without_text") else ""
    return (
        f"The baseline a learned router must beat: {reference['features']}, a logistic regression per outcome "
        f"(C {reference['c']:g}; graded outcomes as fractional successes), fitted on {rows['edge']} train-split "
        f"rows (edge) and {rows['cloud']} (cloud){left_out} in {reference['fit_seconds']:.1f} s; score "
        f"P(cloud good) - P(edge good); edge below {reference['lo']:.3f}, cloud above {reference['hi']:.3f}, "
        f"fallback in between, picked on {reference['fit']['rows']} val-split rows for the bundle's target "
        f"`{reference['target']}` (met: {reference['fit']['met_target']})."
    )


def summary_table(metrics: dict):
    """The headline figures of an evaluation's metrics.json as a rich Table, for the terminal."""
    from rich.table import Column, Table

    if "figures" not in metrics:
        table = Table("estimator", "quality", "95% interval", title="off-policy estimates on logged traffic")
        for name, value in ((metrics.get("off_policy") or {}).get("quality") or {}).items():
            table.add_row(name.upper(), num(value["estimate"]), _ci(value["ci95"]))
        return table
    figures = Comparison.from_dict(metrics["figures"])
    columns = [
        ("cloud", show("cloud_share", ".1%")),
        ("misroute", show("misroute_rate", ".1%")),
        ("under", show("under_routing", ".1%")),
        ("over", show("over_routing", ".1%")),
        ("quality", show("quality")),
        ("matched", show("at_matched_share.quality")),
        ("APGR", show("apgr")),
    ]
    table = Table(
        "policy",
        *(Column(head, justify="right") for head, _ in columns),
        title=f"{metrics['setup']['split']} split: {figures.population.rows} requests; matched cloud share "
        f"{pct(figures.matched_cloud_share)}",
    )
    for name, p in figures.policies.items():
        table.add_row(POLICIES[name].short, *(cell(p) for _, cell in columns))
    return table


def json_ready(value):
    """For strict JSON (metrics.json): typed figures as their dicts, NaN -> None, numpy scalars -> Python numbers."""
    if hasattr(value, "as_dict"):
        return json_ready(value.as_dict())
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    if hasattr(value, "item"):
        value = value.item()
    return None if isinstance(value, float) and math.isnan(value) else value


def _figure(width: float = 7.5, height: float = 5.0):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    return fig, fig.subplots()


def _save(fig, ax, path, *, grid_axis: str = "both", **legend) -> None:
    """Every plot's finish: a light grid, the legend (`legend`: its options), the PNG."""
    ax.grid(alpha=0.3, axis=grid_axis)
    ax.legend(**legend)
    fig.tight_layout()
    fig.savefig(path)


def plot_quality_vs_share(figures: Comparison, curves: dict, path: Path) -> None:
    """Every policy's quality curve on one chart, operating points marked."""
    fig, ax = _figure()
    for name, curve in curves.items():
        (line,) = ax.plot(
            curve.f, curve.quality, label=POLICIES[name].label, lw=1.4, ls="--" if name in ("random", "oracle") else "-"
        )
        p = figures.policies[name]
        ax.plot(p.cloud_share, p.quality, "o", color=line.get_color(), ms=8, mec="black", zorder=4)
    for name, marker in (("all_edge", "s"), ("all_cloud", "D")):
        if name in figures.policies:
            p = figures.policies[name]
            ax.plot(p.cloud_share, p.quality, marker, color="black", ms=5, label=POLICIES[name].label, zorder=5)
    ax.axhline(figures.population.all_cloud_quality, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("cloud share (requests sent to the cloud first)")
    ax.set_ylabel("quality (before fallback)")
    ax.set_title(f"Quality vs cloud share ({figures.population.rows} requests; dots = operating points)")
    _save(fig, ax, path, fontsize=8, loc="lower right")


def plot_quality_vs_cost(per_fold: list[dict], names, path) -> None:
    """The router's quality-cost curve (the folds' mean), each endpoint alone, the oracle and the operating points."""
    fig, ax = _figure()
    mean = lambda *path: float(np.nanmean([figure_at(f, path) for f in per_fold]))  # noqa: E731
    cost = np.nanmean([f["curve"]["cost"] for f in per_fold], axis=0)
    quality = np.nanmean([f["curve"]["quality"] for f in per_fold], axis=0)
    ax.plot(cost, quality, "-", lw=1.4, label="router: best expected quality - price x cost, every price")
    for name in names:
        ax.plot(mean("single", name, "cost"), mean("single", name, "quality"), "s", ms=7, label=f"{name} alone")
    ax.plot(mean("oracle", "cost"), mean("oracle", "quality"), "*", ms=12, color="black", label="oracle")
    for point, marker in (("matched", "o"), ("margin", "^"), ("budget", "v"), ("cascade", "D")):
        ax.plot(mean(point, "cost"), mean(point, "quality"), marker, ms=8, mec="black", label=f"router: {point}")
    ax.set_xscale("symlog", linthresh=1e-4)
    ax.set_xlabel("mean cost per request ($)")
    ax.set_ylabel("quality (logged outcome of the chosen endpoint)")
    ax.set_title(f"Quality vs cost, {len(per_fold)} held-out folds (mean)")
    _save(fig, ax, path, fontsize=7, loc="upper left")


def plot_misroute_by_domain(groups: dict[str, SplitSummary], path: Path) -> None:
    """Stacked under/over-routing per domain group: a bar each for the learned router, reference and rule tables."""
    shown = ("learned", "reference", "rule_table", "tuned_rule_table")
    names = [n for n in shown if n in next(iter(groups.values())).policies]
    fig, ax = _figure(9.0, 5.0)
    x, width = np.arange(len(groups)), 0.8 / len(names)
    for i, name in enumerate(names):
        at, label = x + i * width, POLICIES[name].label
        under = [g.policies[name].under_routing for g in groups.values()]
        over = [g.policies[name].over_routing for g in groups.values()]
        bars = ax.bar(at, under, width, label=f"{label}: under")
        ax.bar(at, over, width, bottom=under, color=bars.patches[0].get_facecolor(), alpha=0.45, label=f"{label}: over")
    ax.set_xticks(x + width * (len(names) - 1) / 2, list(groups), rotation=30, ha="right")
    ax.set_ylabel("misroute rate (solid: under-routing, light: over-routing)")
    ax.set_title("Misroute rate by domain group at each policy's operating point")
    ax.set_ylim(0, 1.3)  # room for the legend above the bars
    ax.set_yticks(np.linspace(0, 1, 6))
    _save(fig, ax, path, grid_axis="y", fontsize=7, ncol=len(names), loc="upper center")


def plot_reliability(calibration: dict, path: Path) -> None:
    """Observed outcome per bin against the mean prediction, for each probability, with bin sizes."""
    fig, ax = _figure(6.0, 5.0)
    ax.plot([0, 1], [0, 1], color="grey", ls=":", label="perfect calibration")
    for name, table_ in calibration.items():
        bins = table_["bins"]
        means, observed = [b["mean_score"] for b in bins], [b["observed_rate"] for b in bins]
        ax.plot(means, observed, "o-", label=f"{name} (ECE {table_['ece']:.3f})")
        for b, point in zip(bins, zip(means, observed)):
            ax.annotate(str(b["rows"]), point, fontsize=7, textcoords="offset points", xytext=(4, -10))
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("mean predicted probability in bin")
    ax.set_ylabel("observed mean outcome")
    ax.set_title("Reliability (numbers = rows)")
    _save(fig, ax, path, fontsize=8, loc="upper left")


def plot_acceptance_roc(acceptance: dict, path: Path) -> None:
    """Catch rate against false-reject rate over every threshold, the chosen one marked."""
    fig, ax = _figure(6.0, 5.0)
    roc = acceptance["roc"]
    ax.plot(roc["false_reject_rate"], roc["catch_rate"], lw=1.6, label=f"learned check (AUC {acceptance['auc']:.3f})")
    ax.plot([0, 1], [0, 1], color="grey", ls=":", label="chance")
    chosen = (acceptance["false_reject_rate"], acceptance["catch_rate"])
    ax.plot(*chosen, "o", ms=8, mec="black", label=f"threshold {acceptance['threshold']:.3f}")
    ax.set_xlabel("false-reject rate (good edge answers rejected)")
    ax.set_ylabel("catch rate (edge failures rejected)")
    ax.set_title(f"Acceptance check ROC ({acceptance['rows']} answers, {acceptance['failures']} failures)")
    _save(fig, ax, path, fontsize=8, loc="lower right")


def write_plots(metrics: dict, curves: dict, out: Path) -> list[Path]:
    """The PNGs into `out` (the acceptance ROC when measured); returns their paths."""
    if not curves:  # N-endpoint bundles and off-policy estimates alone have no plots
        return []
    paths = {key: out / file for key, file in PLOTS.items()}
    plot_quality_vs_share(metrics["figures"], curves, paths["quality"])
    plot_misroute_by_domain(metrics["breakdowns"]["domain"], paths["domain"])
    plot_reliability(metrics["calibration"], paths["reliability"])
    if (metrics.get("acceptance") or {}).get("roc"):
        paths["acceptance_roc"] = out / "acceptance_roc.png"
        plot_acceptance_roc(metrics["acceptance"], paths["acceptance_roc"])
    return list(paths.values())


def write_report(metrics: dict, curves: dict, out: Path) -> tuple[dict, list[Path]]:
    """metrics.json, report.md and the plots into `out`; returns the JSON-ready metrics and the files."""
    out.mkdir(parents=True, exist_ok=True)
    ready = json_ready(metrics)
    (out / "metrics.json").write_text(json.dumps(ready, indent=2, allow_nan=False), encoding="utf-8")
    (out / "report.md").write_text(render(metrics), encoding="utf-8")
    return ready, [out / "report.md", out / "metrics.json", *write_plots(metrics, curves, out)]
