"""``report.md``: the behaviour-shift report as Markdown, rendered from a
:class:`~rlmdistill.analysis.schema.Report` only, so every number shown is in ``report.json``.

Numbers are rounded to 4 significant digits; an undefined value or interval is written as
``undefined [k]`` / ``(no CI [k])`` with footnote ``[k]`` under the table giving the reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlmdistill.analysis.stats import Correlation, Estimate, PairedComparison

if TYPE_CHECKING:
    from rlmdistill.analysis.schema import Report

__all__ = ["render_markdown"]


def _n(v: float | None) -> str:
    if v is None:
        return "n/a"
    if v != 0 and (abs(v) >= 1e5 or abs(v) < 1e-3):
        return f"{v:.3g}"
    return f"{v:.4g}"


class _Notes:
    """Footnotes of one Markdown table: each distinct reason once, cited as ``[k]``."""

    def __init__(self) -> None:
        self.reasons: list[str] = []

    def ref(self, reason: str | None) -> str:
        if not reason:
            return ""
        if reason not in self.reasons:
            self.reasons.append(reason)
        return f"[{self.reasons.index(reason) + 1}]"

    def lines(self) -> list[str]:
        out = [""]
        if self.reasons:
            out += [f"[{i}] {r}  " for i, r in enumerate(self.reasons, start=1)] + [""]
        return out


def _est(e: Estimate, notes: _Notes) -> str:
    if e.value is None:
        return f"undefined {notes.ref(e.reason)}"
    if e.low is None or e.high is None:
        return f"{_n(e.value)} (no CI {notes.ref(e.reason)})"
    note = f" {notes.ref(e.reason)}" if e.reason else ""
    return f"{_n(e.value)} [{_n(e.low)}, {_n(e.high)}]{note}"


def _corr(c: Correlation, notes: _Notes) -> str:
    if c.value is None:
        return f"undefined {notes.ref(c.reason)}"
    if c.low is not None and c.high is not None:
        ci = f"[{_n(c.low)}, {_n(c.high)}]" + (f" {notes.ref(c.reason)}" if c.reason else "")
    else:
        ci = f"(no CI {notes.ref(c.reason)})"
    p = f", p = {_n(c.p_value)}" if c.p_value is not None else ""
    return f"{_n(c.value)} {ci}{p}"


def _p(p: PairedComparison, notes: _Notes) -> str:
    w = p.wilcoxon
    return _n(w.p_value) if w.p_value is not None else f"undefined {notes.ref(w.reason)}"


def _table(header: list[str], body: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in body]
    return out


def _runs(report: Report) -> list[str]:
    s = report.settings
    lines = [
        "# Behaviour-shift report",
        "",
        f"Created {report.created_at.isoformat()} by rlmdistill "
        f"{report.versions.get('rlmdistill', '?')} (commit {report.git_commit or 'unknown'}). "
        f"Baseline: **{s['baseline']}**. Intervals: {s['confidence']:.0%}, "
        f"{s['n_resamples']} bootstrap resamples, seed {s['seed']}. "
        f"Price table: {s['price_table']}.",
        "",
        "## Runs",
        "",
        *_table(
            ["arm", "run", "root", "sub", "depth", "grader", "episodes", "rooms", "statuses"],
            [
                [
                    a.label,
                    a.run_id,
                    a.root_name,
                    a.sub_name,
                    str(a.depth),
                    str(a.grader),
                    str(a.n_episodes),
                    str(a.n_rooms),
                    ", ".join(f"{k} {v}" for k, v in sorted(a.status_counts.items())),
                ]
                for a in report.arms
            ],
        ),
        "",
        "Rooms: "
        + "; ".join(
            f"{r.label} ({r.n_documents} documents, {r.n_chars:,} chars)" for r in report.rooms
        )
        + ".",
        "",
    ]
    if report.notes:
        lines += ["**Notes:**", "", *[f"- {n}" for n in report.notes], ""]
    lines += ["## Methods", "", *[f"- **{k}**: {v}" for k, v in report.methods.items()], ""]
    return lines


def _per_arm(report: Report) -> list[str]:
    conf = f"{report.settings['confidence']:.0%}"
    labels = [a.label for a in report.arms]
    names = [am.metric for am in report.per_arm[labels[0]]]
    by = {(lab, am.metric): am for lab in labels for am in report.per_arm[lab]}
    notes = _Notes()
    lines = [f"## Per-arm means (mean of room means, {conf} cluster-bootstrap CI over rooms)", ""]
    lines += _table(
        ["metric", *labels],
        [
            [
                n,
                *[
                    f"{_est(by[(lab, n)].mean, notes)} ({by[(lab, n)].episodes.n} ep)"
                    for lab in labels
                ],
            ]
            for n in names
        ],
    )
    return lines + notes.lines()


def _comparisons(report: Report) -> list[str]:
    lines: list[str] = []
    for c in report.comparisons:
        notes = _Notes()
        lines += [
            f"## {c.b} vs {c.a} (before/after)",
            "",
            f"Paired over {len(c.rooms_paired)} rooms; only in {c.a}: "
            f"{', '.join(c.rooms_only_in_a) or 'none'}; only in {c.b}: "
            f"{', '.join(c.rooms_only_in_b) or 'none'}. Difference = {c.b} - {c.a}.",
            "",
        ]
        lines += _table(
            [
                "metric",
                f"{c.a} mean",
                f"{c.b} mean",
                "paired difference",
                "Wilcoxon p",
                "rooms (up/down/tied)",
                "episodes A/B",
            ],
            [
                [
                    r.metric,
                    _est(r.a, notes),
                    _est(r.b, notes),
                    _est(r.paired.mean_difference, notes),
                    _p(r.paired, notes),
                    f"{r.paired.n_pairs} ({r.paired.n_improved}/{r.paired.n_declined}/"
                    f"{r.paired.n_tied})",
                    f"{r.n_episodes_a}/{r.n_episodes_b}",
                ]
                for r in c.rows
            ],
        )
        lines += notes.lines()
        f = c.flipped
        lines += [
            f"### Criteria that flipped, {c.a} -> {c.b} ({f.n_gained} gained, {f.n_lost} lost, "
            f"of {f.n_compared} compared)",
            "",
            f"Rule: {f.rule}.",
            "",
        ]
        if f.rows:
            lines += _table(
                ["room", "criterion", "type", f"{c.a} pass share", f"{c.b} pass share", "change"],
                [
                    [
                        x.room,
                        x.criterion_id,
                        str(x.criterion_type),
                        f"{_n(x.a_pass_share)} ({x.a_majority}, n={x.a_n})",
                        f"{_n(x.b_pass_share)} ({x.b_majority}, n={x.b_n})",
                        x.direction,
                    ]
                    for x in f.rows
                ],
            )
        else:
            lines.append("No criterion flipped.")
        lines.append("")
    return lines


def _sizes_and_tokens(report: Report) -> list[str]:
    notes = _Notes()
    lines = ["## Sub-calls vs room size (one point per room: room mean of sub-calls)", ""]
    lines += _table(
        ["arm", "room size", "rooms", "Pearson r [Fisher z CI]", "Spearman rho [bootstrap CI]"],
        [
            [s.arm, s.x, str(len(s.rooms)), _corr(s.pearson, notes), _corr(s.spearman, notes)]
            for s in report.size_correlations
        ],
    )
    lines += notes.lines()
    lines += ["## Root vs sub tokens (all episodes)", ""]
    lines += _table(
        [
            "arm",
            "root in",
            "root cached",
            "root out",
            "sub in",
            "sub cached",
            "sub out",
            "root in %",
            "root out %",
            "sub in %",
            "sub out %",
        ],
        [
            [
                t.arm,
                str(t.root_prompt),
                "unknown" if t.root_cached is None else str(t.root_cached),
                str(t.root_completion),
                str(t.sub_prompt),
                "unknown" if t.sub_cached is None else str(t.sub_cached),
                str(t.sub_completion),
                *[
                    "n/a" if (v := t.shares[k]) is None else f"{v:.1%}"
                    for k in ("root_input", "root_output", "sub_input", "sub_output")
                ],
            ]
            for t in report.token_shares
        ],
    )
    return [*lines, ""]


def _ablations_and_grids(report: Report) -> list[str]:
    lines: list[str] = []
    for ab in report.depth_ablations:
        notes = _Notes()
        p = ab.paired
        lines += [
            f"## Depth ablation: {ab.depth1_arm} (depth 1) vs {ab.depth2_arm} (depth 2)",
            "",
            *([f"Note: {ab.note}.", ""] if ab.note else []),
            f"Pass rate per room, paired over {p.n_pairs} rooms: improved {p.n_improved}, "
            f"declined {p.n_declined}, tied {p.n_tied}; mean change (depth 2 - depth 1) "
            f"{_est(p.mean_difference, notes)}; Wilcoxon p {_p(p, notes)}.",
            *notes.lines(),
        ]
        lines += _table(
            ["arm", "episodes", "no memo", "read but wrote no memo"],
            [
                [lab, str(ab.n_episodes[lab]), str(ab.no_memo[lab]), str(ab.read_no_memo[lab])]
                for lab in (ab.depth1_arm, ab.depth2_arm)
            ],
        )
        lines.append("")
    for g in report.grids:
        notes = _Notes()
        cell = {(c.root, c.sub): c for c in g.cells}
        lines += [f"## Root x sub grid (depth {g.depth}): mean pass rate", ""]
        lines += _table(
            ["root \\ sub", *g.subs],
            [
                [
                    r,
                    *[
                        f"{_est(cell[(r, s)].mean, notes)} ({cell[(r, s)].n_episodes} ep)"
                        if (r, s) in cell
                        else "-"
                        for s in g.subs
                    ],
                ]
                for r in g.roots
            ],
        )
        lines += notes.lines()
        for gap in [*g.root_gaps, *g.sub_gaps]:
            varying = "root" if gap.fixed_role == "sub" else "sub"
            if gap.gap is None:
                lines.append(
                    f"- {gap.fixed_role} {gap.fixed}: best-worst {varying} gap undefined "
                    f"({gap.reason})"
                )
            else:
                lines.append(
                    f"- {gap.fixed_role} {gap.fixed}: best {varying} {gap.best} "
                    f"({_n(gap.best_value)}) - worst {gap.worst} ({_n(gap.worst_value)}) = "
                    f"{_n(gap.gap)}"
                )
        lines.append("")
    return lines


def _training_and_figures(report: Report) -> list[str]:
    lines: list[str] = []
    if report.training:
        lines += ["## Training curves", ""]
        lines += _table(
            ["adapter", "logged steps", "final loss", "final EMA loss", "non-finite losses"],
            [
                [
                    c.adapter,
                    str(len(c.steps)),
                    _n(c.final_loss),
                    _n(c.final_ema_loss),
                    str(c.n_nonfinite),
                ]
                for c in report.training
            ],
        )
        lines.append("")
    lines += ["## Figures", ""]
    for fig in report.figures:
        lines += [f"### {fig.title}", "", f"![{fig.name}]({fig.file})", ""]
        if fig.notes:
            lines += [*[f"- {n}" for n in fig.notes], ""]
    lines += ["## Metric definitions", ""]
    lines += [f"- `{k}`: {v}" for k, v in report.metric_descriptions.items()]
    return lines


def render_markdown(report: Report) -> str:
    """The report as Markdown; every number in it is a field of ``report`` (report.json)."""
    lines = [
        *_runs(report),
        *_per_arm(report),
        *_comparisons(report),
        *_sizes_and_tokens(report),
        *_ablations_and_grids(report),
        *_training_and_figures(report),
    ]
    return "\n".join(lines) + "\n"
