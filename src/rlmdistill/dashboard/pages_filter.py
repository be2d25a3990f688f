"""Filter preview page (the training runs at start; every setting kept across pages): the
rejection-sampling rules as widgets, live counts of kept and
dropped episodes by reason (the filter stage's own :func:`~rlmdistill.filter.select_episodes`
and :func:`~rlmdistill.filter.build_report`), and an export button that writes the dataset
with :func:`rlmdistill.filter.main.run` -- the filter stage behind ``rlmdistill filter``;
an export from runs of held-out rooms is refused unless overridden (:func:`check_no_heldout`).

The preview reads summaries and verdicts only (never trajectories: ``dedup: completions`` is
left to the CLI) and is cached by the runs' paths and stamps plus the rules as JSON.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple, get_args

import pandas as pd
import streamlit as st

from rlmdistill.dashboard import data
from rlmdistill.dashboard.data import Workspace
from rlmdistill.dashboard.roles import WorkspaceRoles, heldout_rooms_of
from rlmdistill.dashboard.widgets import (
    KEEP_PREFIX,
    fmt_pct,
    keep,
    pick_runs,
    remember,
    roles_of,
    runs_with_role,
)
from rlmdistill.filter import (
    FilterReport,
    FilterRuleError,
    FilterRules,
    build_report,
    select_episodes,
)
from rlmdistill.filter.expr import ExpressionError
from rlmdistill.traces.runs import grader_ids
from rlmdistill.traces.schema import EpisodeStatus

STATUSES: list[str] = list(get_args(EpisodeStatus))


class Preview(NamedTuple):
    """What the page shows for one set of runs and rules."""

    report: FilterReport
    decisions: pd.DataFrame
    """One row per episode: ``run_id, episode_id, room_id, status, kept, primary_reason,
    reasons, pass_rate, coverage``."""


@st.cache_data(max_entries=32, show_spinner=False)
def _preview(run_dirs: tuple[str, ...], stamps: tuple[str, ...], rules_json: str) -> Preview:
    rules = FilterRules.model_validate_json(rules_json)
    selection = select_episodes([Path(r) for r in run_dirs], rules)
    decisions = pd.DataFrame(
        [
            {
                "run_id": d.run_id,
                "episode_id": d.episode_id,
                "room_id": d.room_id,
                "status": d.status,
                "kept": d.kept,
                "primary_reason": d.primary_reason,
                "reasons": ", ".join(d.reasons),
                "pass_rate": d.pass_rate,
                "coverage": d.coverage,
            }
            for d in selection.decisions
        ]
    )
    return Preview(build_report(selection), decisions)


def preview(run_dirs: list[Path], rules: FilterRules) -> Preview:
    """Select episodes of ``run_dirs`` with ``rules`` (cached by paths, run stamps and rules).

    Raises :class:`FilterRuleError` / ``ExpressionError`` as :func:`select_episodes` does.
    """
    return _preview(
        tuple(str(r) for r in run_dirs),
        tuple(data.run_stamp(r) for r in run_dirs),
        rules.model_dump_json(),
    )


RULE_KEYS: list[str] = []
"""Session keys of the rule widgets (filled as they are drawn); kept across pages."""


def _kept(key: str, default: Any) -> str:
    keep(key, default)
    if key not in RULE_KEYS:
        RULE_KEYS.append(key)
    return key


def _opt_threshold(label: str, key: str, help_: str) -> float | None:
    on = st.checkbox(label, key=_kept(f"{key}_on", False), help=help_)
    value = st.slider(
        label,
        0.0,
        1.0,
        step=0.05,
        key=_kept(key, 0.5),
        disabled=not on,
        label_visibility="collapsed",
    )
    return float(value) if on else None


def _opt_int(label: str, key: str) -> int | None:
    v = int(st.number_input(label + " (0: off)", min_value=0, step=1, key=_kept(key, 0)))
    return v or None


def rules_from_widgets(graders: list[str]) -> dict[str, Any]:
    """Draw the rule widgets (in the sidebar of the page's first column) and return the rules
    as a dict for :meth:`FilterRules.from_dict`. Every setting survives a visit to another
    page (:func:`~rlmdistill.dashboard.widgets.keep`)."""
    rules: dict[str, Any] = {}
    if graders:
        if st.session_state.get(KEEP_PREFIX + "f_grader") not in graders:
            st.session_state.pop(KEEP_PREFIX + "f_grader", None)
        rules["grader"] = st.selectbox(
            "Grader (pass rate from)", graders, key=_kept("f_grader", graders[0])
        )
    rules["required_status"] = st.multiselect(
        "Required status (none: any)", STATUSES, key=_kept("f_status", ["completed"])
    )
    rules["require_memo"] = st.checkbox("Require a memo", key=_kept("f_memo", True))
    rules["pass_rate_field"] = st.selectbox(
        "Pass rate",
        ["pass_rate", "graded_pass_rate", "weighted_pass_rate"],
        key=_kept("f_prfield", "pass_rate"),
    )
    rules["min_pass_rate"] = _opt_threshold("Min pass rate", "f_min_pr", "absolute, inclusive")
    rules["min_pass_rate_quantile"] = _opt_threshold(
        "Min pass-rate quantile (per room)", "f_q_pr", "at or above this quantile of the room"
    )
    rules["min_coverage"] = _opt_threshold("Min coverage", "f_min_cov", "absolute, inclusive")
    rules["min_coverage_quantile"] = _opt_threshold(
        "Min coverage quantile (per room)", "f_q_cov", "at or above this quantile of the room"
    )
    rules["min_turns"] = _opt_int("Min turns", "f_min_turns")
    rules["max_turns"] = _opt_int("Max turns", "f_max_turns")
    rules["min_sub_calls"] = _opt_int("Min sub-calls", "f_min_sub")
    rules["top_k_per_room"] = _opt_int("Best-of-n: top k per room", "f_topk")
    rules["dedup"] = (
        ["memo"] if st.checkbox("De-duplicate memos", key=_kept("f_dedup", True)) else []
    )
    where = st.text_area("Where (one safe expression per line)", key=_kept("f_where", ""))
    rules["where"] = [w.strip() for w in where.splitlines() if w.strip()]
    remember(RULE_KEYS)
    return {k: v for k, v in rules.items() if v is not None}


class HeldOutError(ValueError):
    """An export would write episodes of held-out (evaluation) rooms into training data."""


def check_no_heldout(run_dirs: list[Path], roles: WorkspaceRoles, allow: bool) -> None:
    """Refuse an export from runs that ran held-out rooms (``rooms/split.json``) or that the
    loop collected for evaluation, unless ``allow``: training on them would leak the
    evaluation into the model. Raises :class:`HeldOutError` naming each run, its held-out
    rooms and the override."""
    held = heldout_rooms_of(run_dirs, roles)
    if held and not allow:
        named = "; ".join(f"{run}: {', '.join(rooms)}" for run, rooms in held.items())
        raise HeldOutError(
            f"refusing to export held-out rooms into training data ({named}). Unpick these "
            "runs, or tick 'Export held-out rooms anyway' to override."
        )


def _export(ws: Workspace, run_dirs: list[Path], rules: FilterRules, roles: WorkspaceRoles) -> None:
    from rlmdistill.export.main import ExportConfig
    from rlmdistill.export.main import run as export_stage
    from rlmdistill.export.options import build_export_options
    from rlmdistill.filter.main import FilterConfig
    from rlmdistill.filter.main import run as filter_stage

    with st.form("f_export"):
        st.markdown("**Export the dataset** (same as `rlmdistill filter ... --out datasets/NAME`)")
        name = st.text_input("Dataset name", key="f_name")
        tokenizer = st.text_input(
            "Tokenizer (directory or embedded model name)", value="smollm2-135m", key="f_tok"
        )
        c = st.columns(4)
        mode = c[0].selectbox("Mode", ["trajectory", "turn"], key="f_mode")
        style = c[1].selectbox("Style", ["plain", "tools"], key="f_style")
        system_prompt = c[2].text_input("System prompt", value="collected", key="f_sys")
        max_length = c[3].number_input("Max length", min_value=8, value=8192, key="f_maxlen")
        force = st.checkbox("Replace an existing dataset folder", key="f_force")
        allow = st.checkbox(
            "Export held-out rooms anyway (evaluation data in the training set)",
            key="f_allow_heldout",
        )
        go = st.form_submit_button("Export dataset")
    if not go:
        return
    if not name.strip():
        st.error("Give the dataset a name.")
        return
    try:
        check_no_heldout(run_dirs, roles, allow)
    except HeldOutError as exc:
        st.error(str(exc))
        return
    out = ws.datasets / name.strip()
    try:
        options = build_export_options(
            tokenizer=tokenizer.strip(),
            mode=mode,
            style=style,
            system_prompt=system_prompt.strip() or None,
            max_length=int(max_length),
        )
        with st.spinner("exporting..."):
            outcome = filter_stage(FilterConfig(runs=run_dirs, out=out, rules=rules, force=force))
            outcome.require_kept()
            export_stage(
                ExportConfig(
                    out=out,
                    options=options,
                    episodes=outcome.decisions,
                    card_extra=outcome.card_section(),
                ),
                progress=False,
            )
    except (FilterRuleError, ExpressionError, FileExistsError, ValueError, OSError) as exc:
        st.error(f"export failed: {exc}")
        return
    st.success(
        f"wrote {out.relative_to(ws.root)}: {outcome.report.n_kept} of {outcome.report.n_total} "
        f"episodes kept"
    )
    manifest = data.export_manifest(out)
    if manifest is not None:
        st.caption(f"{manifest.n_examples} examples exported")


def render(ws: Workspace) -> None:
    """Render the Filter preview page."""
    roles = roles_of(ws)
    run_dirs = pick_runs(ws, "f_runs", default=runs_with_role("train"))
    if not run_dirs:
        st.info("Pick at least one run.")
        return
    held = heldout_rooms_of(run_dirs, roles)
    if held:
        st.warning(
            "Picked runs ran held-out rooms ("
            + "; ".join(f"{r}: {', '.join(rooms)}" for r, rooms in held.items())
            + "): the export refuses them unless overridden."
        )
    graders = sorted({g for r in run_dirs for g in grader_ids(r)})
    left, right = st.columns([1, 2])
    with left:
        raw = rules_from_widgets(graders)
    try:
        rules = FilterRules.from_dict(raw, source="dashboard rules")
        pv = preview(run_dirs, rules)
    except (FilterRuleError, ExpressionError) as exc:
        right.error(str(exc))
        return
    rep = pv.report
    with right:
        c = st.columns(3)
        c[0].metric("episodes", rep.n_total)
        c[1].metric("kept", rep.n_kept)
        c[2].metric("dropped", rep.n_dropped)
        st.markdown("**Dropped by reason** (first rule failed)")
        st.dataframe(
            pd.DataFrame(list(rep.dropped_by_reason.items()), columns=["reason", "episodes"]),
            hide_index=True,
        )
        st.markdown("**Per room**")
        st.dataframe(
            pd.DataFrame(
                [
                    {
                        "room": r.room_id,
                        "documents": r.room_docs,
                        "episodes": r.n_total,
                        "kept": r.n_kept,
                        "dropped": ", ".join(f"{k} {v}" for k, v in r.dropped.items()),
                        "pass-rate threshold": r.thresholds.pass_rate_threshold,
                        "coverage threshold": r.thresholds.coverage_threshold,
                    }
                    for r in rep.rooms
                ]
            ),
            hide_index=True,
            width="stretch",
        )
        pr, cov = rep.pass_rate, rep.coverage
        st.caption(
            f"{rep.pass_rate_field}: mean {fmt_pct(pr.before.mean)} before, "
            f"{fmt_pct(pr.after.mean)} after · coverage: mean {fmt_pct(cov.before.mean)} before, "
            f"{fmt_pct(cov.after.mean)} after"
        )
        with st.expander("Per-episode decisions"):
            st.dataframe(pv.decisions, hide_index=True, width="stretch")
        with st.expander("Rules as YAML/JSON (for `rlmdistill filter --rules`)"):
            st.code(json.dumps(rules.model_dump(mode="json"), indent=2), language="json")
        _export(ws, run_dirs, rules, roles)
