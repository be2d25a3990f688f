"""``report.md``: the behaviour-shift report as Markdown, rendered from a
:class:`~rlmdistill.analysis.schema.Report` only, so every number shown is in ``report.json``.

Numbers are rounded to 4 significant digits; an undefined value or interval is written as
``undefined [k]`` / ``(no CI [k])`` with footnote ``[k]`` under the table giving the reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlmdistill.mdtable import markdown_table
from rlmdistill.stats import Correlation, CorrelationChange, Estimate, PairedComparison

if TYPE_CHECKING:
    from rlmdistill.analysis.schema import DepthAblation, Report

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
    side = " (one-sided)" if e.one_sided else ""
    return f"{_n(e.value)} [{_n(e.low)}, {_n(e.high)}]{side}{note}"


def _t_means(report: Report) -> bool:
    """Whether the report's means carry Student t intervals (reports before 2026-12-03: a
    percentile bootstrap; the stored ``methods`` say which, so an old report renders as it
    was computed)."""
    return "Student" in report.methods.get("mean", "")


def _rate_means(report: Report) -> bool:
    """Whether the report's means of rates carry Korn-Graubard intervals (its stored
    ``methods`` say so; reports before it: Student t for every mean)."""
    return "Korn & Graubard" in report.methods.get("mean", "")


def _mean_ci(report: Report) -> str:
    """What a mean's interval is, in a heading's words (reports before the Korn-Graubard
    interval of rates: t for every metric; before 2026-12-03: a cluster bootstrap)."""
    if _rate_means(report):
        return "CI (rates: Korn-Graubard; others: t)"
    return "t CI" if _t_means(report) else "cluster-bootstrap CI"


def _corr(c: Correlation | CorrelationChange, notes: _Notes) -> str:
    """A correlation (or the change of one) with its interval and p, or ``undefined [k]``."""
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


def _runs(report: Report) -> list[str]:
    s = report.settings
    lines = [
        "# Behaviour-shift report",
        "",
        f"Created {report.created_at.isoformat()} by rlmdistill "
        f"{report.versions.get('rlmdistill', '?')} (commit {report.git_commit or 'unknown'}). "
        f"Baseline: **{s['baseline']}**. Intervals: {s['confidence']:.0%}"
        + (
            f"; means: {_mean_ci(report)} over rooms; paired differences: Student t over "
            f"rooms; correlation changes: {s['n_resamples']} bootstrap resamples, seed "
            f"{s['seed']}. "
            if _rate_means(report)
            else f"; means and paired differences: Student t over rooms; correlation changes: "
            f"{s['n_resamples']} bootstrap resamples, seed {s['seed']}. "
            if _t_means(report)
            else f", {s['n_resamples']} bootstrap resamples, seed {s['seed']}. "
        )
        + f"Price table: {s['price_table']}.",
        "",
        "## Runs",
        "",
        *markdown_table(
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
    lines = [f"## Per-arm means (mean of room means, {conf} {_mean_ci(report)} over rooms)", ""]
    lines += markdown_table(
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
        lines += [
            f"**Timeouts differ:** {f.note}.\n"
            for f in report.timeout_flags
            if (f.a, f.b) == (c.a, c.b) and "comparison" in f.sections
        ]
        lines += markdown_table(
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
            lines += markdown_table(
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
    lines += markdown_table(
        ["arm", "room size", "rooms", "Pearson r [Fisher z CI]", "Spearman rho [Fisher z CI]"],
        [
            [
                s.arm,
                s.x,
                str(len(s.rooms))
                + (
                    f" ({len(s.rooms_without_size)} of unknown size left out)"
                    if s.rooms_without_size
                    else ""
                ),
                _corr(s.pearson, notes),
                _corr(s.spearman, notes),
            ]
            for s in report.size_correlations
        ],
    )
    lines += notes.lines()
    lines += ["## Root vs sub tokens (all episodes)", ""]
    lines += markdown_table(
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
        lines += markdown_table(
            ["arm", "episodes", "no memo", "read but wrote no memo"],
            [
                [lab, str(ab.n_episodes[lab]), str(ab.no_memo[lab]), str(ab.read_no_memo[lab])]
                for lab in (ab.depth1_arm, ab.depth2_arm)
            ],
        )
        lines.append("")
        lines += _depth_table(report, ab)
    for g in report.grids:
        notes = _Notes()
        cell = {(c.root, c.sub): c for c in g.cells}
        lines += [f"## Root x sub grid (depth {g.depth}): mean pass rate", ""]
        lines += markdown_table(
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
        lines += markdown_table(
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
    lines += _rl_training(report)
    lines += ["## Figures", ""]
    for fig in report.figures:
        lines += [f"### {fig.title}", "", f"![{fig.name}]({fig.file})", ""]
        if fig.notes:
            lines += [*[f"- {n}" for n in fig.notes], ""]
    lines += ["## Metric definitions", ""]
    lines += [f"- `{k}`: {v}" for k, v in report.metric_descriptions.items()]
    return lines


def _rl_training(report: Report) -> list[str]:
    """One table per RL adapter: each step's reward (mean and sample standard deviation over
    its rollouts), zero-variance groups, KL, loss, staleness and stale-token share, rollout
    wall time and sub-calls per rollout."""
    lines: list[str] = []
    if not report.rl_training:
        return lines
    lines += ["## RL training", ""]
    for c in report.rl_training:
        share = "n/a" if c.zero_variance_share is None else f"{c.zero_variance_share:.0%}"
        lines += [
            f"`{c.adapter}`: {len(c.steps)} logged steps; rollout groups with one reward for "
            f"every rollout (advantage 0, no learning signal): {share}"
            + (" (the log's last line was cut off)" if c.torn_tail else ""),
            "",
        ]
        rows = []
        for i, step in enumerate(c.steps):
            z, g = c.zero_variance_groups[i], c.groups[i]
            rows.append(
                [
                    str(step),
                    _n(c.reward_mean[i]),
                    _n(c.reward_std[i]),
                    "n/a" if z is None or g is None else f"{z}/{g}",
                    _n(c.kl[i]),
                    _n(c.loss[i]),
                    _n(c.staleness[i]),
                    _n(c.stale_token_share[i]),
                    _n(c.rollout_wall_s[i]),
                    _n(c.sub_calls_per_rollout[i]),
                ]
            )
        lines += markdown_table(
            [
                "step",
                "reward mean",
                "reward sd",
                "zero-variance groups",
                "KL",
                "loss",
                "staleness",
                "stale tokens",
                "rollout s",
                "sub-calls / rollout",
            ],
            rows,
        )
        lines.append("")
    return lines


def _adapter_checks(report: Report) -> list[str]:
    if not report.adapter_checks:
        return []
    lines = ["", "## Does the adapter change the root?"]
    for c in report.adapter_checks:
        first = (
            f" (first difference at token {c.first_difference})"
            if c.changed and c.first_difference is not None
            else ""
        )
        lines += [
            "",
            f"Adapter `{c.adapter}`: greedy decoding of {c.max_new_tokens} tokens on "
            f"{c.prompt_source}: **{'changed' if c.changed else 'UNCHANGED'}**{first}; max "
            f"|logit difference| at the first position {_n(c.max_abs_logit_diff)}.",
            "",
            f"- base: `{c.base_text[:300]!r}`",
            f"- tuned: `{c.tuned_text[:300]!r}`",
        ]
    return lines


def _change(c: CorrelationChange, notes: _Notes) -> str:
    """``r_a -> r_b: r_b - r_a`` with its bootstrap interval and p, then Zou's interval
    (``Zou [l, u]``, or ``Zou undefined [k]``) and Steiger's p (``Steiger p = ..``, or
    ``Steiger undefined [k]``; each left out for a report written before it), or
    ``undefined [k]``."""
    if c.value is None:
        return _corr(c, notes)
    boot = _corr(c, notes)  # its notes first
    if c.zou_low is not None and c.zou_high is not None:
        zou = f"; Zou [{_n(c.zou_low)}, {_n(c.zou_high)}]"
    elif c.zou_reason is not None:
        zou = f"; Zou undefined {notes.ref(c.zou_reason)}"
    else:
        zou = ""
    st = c.steiger
    if st is None:  # a report written before Steiger's test
        steiger = ""
    elif st.p_value is not None:
        steiger = f"; Steiger p = {_n(st.p_value)}"
    else:
        steiger = f"; Steiger undefined {notes.ref(st.reason)}"
    return f"{_n(c.r_a)} -> {_n(c.r_b)}: {boot}{zou}{steiger}"


def _resamples(c: CorrelationChange) -> str:
    if not c.n_resamples:
        return "-"
    kind = f"all {c.n_resamples} (exhaustive)" if c.exhaustive else str(c.n_resamples)
    return f"{kind}, {c.n_undefined} left out"


def _arm_table(report: Report) -> list[str]:
    t = report.arm_table
    if t is None:
        return []
    notes = _Notes()
    cells = {(row.metric, c.arm): c for row in t.rows for c in row.cells}
    header = ["metric", t.baseline]
    for arm in t.arms[1:]:
        header += [arm, f"{arm} - {t.baseline}", "Wilcoxon p"]
    body = []
    for row in t.rows:
        line = [row.metric]
        for arm in t.arms:
            c = cells[(row.metric, arm)]
            line.append(f"{_est(c.mean, notes)} ({c.n_episodes} ep)")
            if c.difference is not None:
                d = c.difference
                line += [
                    f"{_est(d.mean_difference, notes)} ({d.n_improved}/{d.n_declined}/{d.n_tied})",
                    _p(d, notes),
                ]
        body.append(line)
    left = "; ".join(f"{arm}: {', '.join(v)}" for arm, v in t.rooms_left_out.items())
    lines = [
        "## Arms on the same rooms",
        "",
        f"{len(t.rooms)} rooms every arm ran ({', '.join(t.rooms) or 'none'}); rooms left out "
        f"(not run by every arm): {left or 'none'}. Each cell: mean of room means "
        f"[{report.settings['confidence']:.0%} {_mean_ci(report)}] (episodes); differences "
        "are arm - baseline per room, paired (rooms up/down/tied). `has_memo` is the memo "
        "rate, `timeout` the share of episodes that ended `timeout` (episode wall-time limit).",
        "",
        *markdown_table(header, body),
        *notes.lines(),
        "Episodes that ended `timeout` (episode wall-time limit) in these rooms: "
        + ", ".join(f"{arm} {t.timeouts[arm]} of {t.n_episodes[arm]}" for arm in t.arms)
        + ".",
        "",
    ]
    flagged = [f for f in report.timeout_flags if "arm_table" in f.sections]
    lines += [f"**Timeouts differ:** {f.note}." for f in flagged]
    return [*lines, ""] if flagged else lines


def _correlation_changes(report: Report) -> list[str]:
    if not report.size_correlation_changes:
        return []
    notes = _Notes()
    lines = [
        "## Change of the sub-calls vs room size correlation between arms",
        "",
        f"Baseline {report.size_correlation_changes[0].a} against each arm, then round on round "
        "(the nearest earlier arm of the same depth) and depth 1 against depth 2 (same root). "
        "Over the rooms both arms ran: r(from) -> r(to): r(to) - r(from) "
        f"[{report.settings['confidence']:.0%} paired percentile bootstrap CI over rooms], "
        "two-sided bootstrap p"
        + (
            "; Zou [Zou's (2007) interval for two correlations that share room size, which "
            "keeps its coverage at few rooms where the bootstrap's falls short: see the methods]."
            if any(
                c.zou_low is not None or c.zou_reason is not None
                for s in report.size_correlation_changes
                for c in (s.pearson, s.spearman)
            )
            else "."  # a report written before Zou's interval
        )
        + (
            " Steiger p: Steiger's (1980) closed-form test of no change, whose false-positive "
            "rate stays near 5% at few rooms where the bootstrap p's is higher for Pearson."
            if any(
                c.steiger is not None
                for s in report.size_correlation_changes
                for c in (s.pearson, s.spearman)
            )
            else ""  # a report written before Steiger's test
        ),
        "",
    ]
    lines += markdown_table(
        [
            "from",
            "to",
            "room size",
            "rooms",
            "Pearson r change",
            "Spearman rho change",
            "resamples",
        ],
        [
            [
                c.a,
                c.b,
                c.x,
                str(len(c.rooms)),
                _change(c.pearson, notes),
                _change(c.spearman, notes),
                _resamples(c.spearman),
            ]
            for c in report.size_correlation_changes
        ],
    )
    lines += notes.lines()
    flagged = [f for f in report.timeout_flags if "size_correlation_change" in f.sections]
    lines += [f"**Timeouts differ:** {f.note}." for f in flagged]
    return [*lines, ""] if flagged else lines


def _depth_table(report: Report, ab: DepthAblation) -> list[str]:
    if not ab.metrics:
        return []
    notes = _Notes()
    lines = [
        f"Depth table ({ab.depth1_arm} depth 1, {ab.depth2_arm} depth 2; means of room means, "
        "change paired over rooms):",
        "",
    ]
    lines += markdown_table(
        [
            "metric",
            "depth 1",
            "depth 2",
            "depth 2 - depth 1",
            "Wilcoxon p",
            "rooms (up/down/tied)",
        ],
        [
            [
                m.metric,
                f"{_est(m.depth1, notes)} ({m.n_episodes_depth1} ep)",
                f"{_est(m.depth2, notes)} ({m.n_episodes_depth2} ep)",
                _est(m.paired.mean_difference, notes),
                _p(m.paired, notes),
                f"{m.paired.n_pairs} ({m.paired.n_improved}/{m.paired.n_declined}/"
                f"{m.paired.n_tied})",
            ]
            for m in ab.metrics
        ],
    )
    lines += notes.lines()
    if ab.timeouts:
        lines += [
            "Episodes that ended `timeout`: "
            + ", ".join(f"{k} {v} of {ab.n_episodes.get(k, 0)}" for k, v in ab.timeouts.items())
            + ".",
            "",
        ]
    pair = (ab.depth1_arm, ab.depth2_arm)
    flagged = [f for f in report.timeout_flags if (f.a, f.b) == pair]
    lines += [f"**Timeouts differ:** {f.note}." for f in flagged]
    return [*lines, ""] if flagged else lines


def _corrected_rates(report: Report) -> list[str]:
    if not report.corrected_rates:
        return []
    conf = f"{report.settings['confidence']:.0%}"
    notes = _Notes()
    rows = []
    for r in report.corrected_rates:
        c, q = r.calibration, r.rate
        rows.append(
            [
                r.arm,
                r.grader,
                f"{_n(q.raw)} ({c.n_pass}/{c.n})",
                _est(q.corrected, notes)
                if q.corrected.value is not None
                else f"undefined: {q.corrected.reason}",
                f"{_n(q.sensitivity)} ({c.true_pass}/{c.m1})",
                f"{_n(q.specificity)} ({c.true_fail}/{c.m0})",
                f"{c.m1 + c.m0} by {', '.join(c.reviewers) or '-'}"
                + (f"; {c.n_stale} stale" if c.n_stale else ""),
            ]
        )
    lines = [
        f"## Pass rates corrected for the grader's errors ({conf} interval)",
        "",
        "The grader's raw pass rate over every criterion it graded, and beside it the "
        "Rogan-Gladen value `(p + q0 - 1) / (q0 + q1 - 1)`, with sensitivity `q1` and "
        "specificity `q0` measured against people's labels of the same run; the interval "
        "carries the uncertainty of all three (Lee et al. 2025, arXiv 2511.21140; "
        "docs/curation.md).",
        "",
    ]
    lines += markdown_table(
        ["arm", "grader", "raw p", "corrected", "sensitivity q1", "specificity q0", "labels"],
        rows,
    )
    lines += notes.lines()
    knotes = _Notes()
    agree: list[list[str | int]] = [
        [
            r.arm,
            a.grader,
            a.criterion_type,
            a.n,
            _est(a.sensitivity, knotes),
            _est(a.specificity, knotes),
            _n(a.kappa) if a.kappa is not None else f"undefined {knotes.ref(a.kappa_undefined)}",
        ]
        for r in report.corrected_rates
        for a in r.calibration.agreement
    ]
    lines += [
        "The grader against people per criterion type (as `judge-agreement --human`; "
        "sensitivity and specificity with 95% Wilson intervals):",
        "",
        *markdown_table(
            ["arm", "grader", "criterion type", "n", "sensitivity", "specificity", "kappa"],
            agree,
        ),
    ]
    return [*lines, *knotes.lines(), ""]


def render_markdown(report: Report) -> str:
    """The report as Markdown; every number in it is a field of ``report`` (report.json)."""
    lines = [
        *_runs(report),
        *_per_arm(report),
        *_corrected_rates(report),
        *_arm_table(report),
        *_comparisons(report),
        *_sizes_and_tokens(report),
        *_correlation_changes(report),
        *_ablations_and_grids(report),
        *_training_and_figures(report),
        *_adapter_checks(report),
    ]
    return "\n".join(lines) + "\n"
