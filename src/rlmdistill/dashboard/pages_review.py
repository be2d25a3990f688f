"""Review page: a person labels a run's episodes, criterion by criterion and keep/reject.

A queue of the run's episodes (:mod:`rlmdistill.dashboard.review_queue`: random, stratified
by grader verdict, disagreement between two graders, most informative). For the current
episode: its memo, and for each rubric criterion the grader's verdict and reason, the
reviewer's label, and the gold evidence (hidden until the reviewer has labelled that
criterion while blind mode is on, the default). The trajectory is one link away (the Trace
viewer). Keyboard: ``p``/``f``/``u`` label the focused criterion PASS/FAIL/UNGRADABLE (the
focus then moves to the next criterion), ``k``/``r`` keep/reject the episode, ``n`` the next
episode. Every label is one line appended to ``runs/NAME/labels.jsonl`` through
:func:`rlmdistill.traces.labels.append_labels`, for the memo the reviewer saw (its hash).

The keys: Streamlit has no key bindings, so one small script (``st.html`` with
``unsafe_allow_javascript``, in the page's own document) clicks the button whose widget key
the pressed letter names; keys typed into a text box, or with Ctrl/Alt/Meta, are left alone.
"""

from __future__ import annotations

import datetime as dt
import getpass
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from rlmdistill.dashboard import data
from rlmdistill.dashboard.data import Workspace
from rlmdistill.dashboard.pages_trace import VERDICT_ICON, demote_headings
from rlmdistill.dashboard.review_queue import SAMPLERS, Sampler, queue_items, review_queue
from rlmdistill.dashboard.runview import RunView
from rlmdistill.dashboard.widgets import keep, pick_run, remember, trace_link
from rlmdistill.rooms.task import Criterion
from rlmdistill.stats import Estimate, corrected_pass_rate
from rlmdistill.traces import labels as lb
from rlmdistill.traces.calibration import run_calibration
from rlmdistill.traces.schema import EpisodeSummary

KEYS = {"p": "rv_p", "f": "rv_f", "u": "rv_u", "k": "rv_k", "r": "rv_r", "n": "rv_n"}
"""Key -> widget key of the button it clicks (the element carries the class ``st-key-<key>``)."""

_SCRIPT = """<script>
(function () {
  if (window.__rlmdistillReviewKeys) { return; }
  window.__rlmdistillReviewKeys = true;
  const keys = %s;
  document.addEventListener("keydown", function (e) {
    if (e.ctrlKey || e.altKey || e.metaKey || e.repeat) { return; }
    const t = e.target;
    if (t && (t.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(t.tagName))) {
      return;
    }
    const key = keys[(e.key || "").toLowerCase()];
    if (!key) { return; }
    const button = document.querySelector(".st-key-" + key + " button");
    if (!button || button.disabled) { return; }
    e.preventDefault();
    button.click();
  });
})();
</script>"""

SETTINGS = ["rv_sampler", "rv_grader", "rv_other", "rv_seed", "rv_reviewer", "rv_blind"]
"""Widget keys of the page's settings, kept across pages (:func:`~rlmdistill.dashboard.
widgets.keep`)."""

NO_GRADER = "(none)"


def default_reviewer() -> str:
    """The OS user name (``getpass.getuser``), ``"reviewer"`` when the OS names none."""
    try:
        return getpass.getuser() or "reviewer"
    except (KeyError, OSError):  # no user name in the environment or the password database
        return "reviewer"


def _install_keys() -> None:
    import json

    st.html(_SCRIPT % json.dumps(KEYS), unsafe_allow_javascript=True)


# ----------------------------------------------------------------------------- labels
def _write(run_dir: Path, label: lb.Label) -> None:
    """Append one label; a refused label is shown on the next draw (the callback cannot
    draw)."""
    try:
        lb.append_labels(run_dir, [label])
    except (ValueError, OSError) as exc:  # LabelsError (a ValueError): nothing was written
        st.session_state["rv_error"] = str(exc)


def _label(
    run_dir: Path,
    summary: EpisodeSummary,
    target: lb.LabelTarget,
    verdict: lb.LabelVerdict,
    criterion_id: str | None,
    *,
    tags_key: str,
    note_key: str,
    focus: tuple[str, int] | None = None,
) -> None:
    """Button callback: write a label for ``summary``'s current memo from the widgets' tags and
    note; a criterion label moves ``focus`` (session key, next index) on."""
    reviewer = str(st.session_state.get("rv_reviewer") or "").strip()
    if not reviewer:
        st.session_state["rv_error"] = "Type a reviewer name first (the Reviewer box above)."
        return
    label = lb.Label(
        schema_version=lb.LABELS_SCHEMA_VERSION,
        episode_id=summary.episode_id,
        memo_hash=lb.memo_hash(summary.memo),
        target=target,
        criterion_id=criterion_id,
        verdict=verdict,
        tags=list(st.session_state.get(tags_key) or []),
        note=str(st.session_state.get(note_key) or ""),
        reviewer=reviewer,
        time=dt.datetime.now(dt.UTC),
    )
    before = st.session_state.get("rv_error")
    _write(run_dir, label)
    if focus is not None and st.session_state.get("rv_error") == before:
        st.session_state[focus[0]] = focus[1]


def _move(key: str, to: int) -> None:
    st.session_state[key] = to


def _mine(run_dir: Path, reviewer: str) -> tuple[dict[tuple[str, str, str | None], Any], list[str]]:
    """This reviewer's latest labels by ``(episode_id, target, criterion_id)`` and the episodes
    they labelled in the order of their first label."""
    labels = lb.read_labels(run_dir)
    latest = {
        (eid, target, cid): label
        for (who, eid, target, cid), label in lb.latest_labels(labels).items()
        if who == reviewer
    }
    order = list(dict.fromkeys(label.episode_id for label in labels if label.reviewer == reviewer))
    return latest, order


def _human(run_dir: Path, view: RunView) -> dict[tuple[str, str], str]:
    """Every reviewer's latest criterion labels of the current memo (the newest across
    reviewers wins): ``(episode_id, criterion_id) -> verdict``."""
    summaries = view.summaries()
    best: dict[tuple[str, str], Any] = {}
    for (_, eid, target, cid), label in lb.latest_labels(lb.read_labels(run_dir)).items():
        s = summaries.get(eid)
        if target != "criterion" or cid is None or s is None:
            continue
        if lb.is_stale(label, lb.memo_hash(s.memo)):
            continue
        if (eid, cid) not in best or best[(eid, cid)].time <= label.time:
            best[(eid, cid)] = label
    return {k: v.verdict for k, v in best.items()}


# ----------------------------------------------------------------------------- drawing
def _settings(view: RunView) -> tuple[Sampler, str | None, str | None, int, str, bool]:
    graders = view.graders
    options = graders or [NO_GRADER]
    keep("rv_sampler", "random")
    keep("rv_grader", "reference" if "reference" in graders else options[0])
    keep("rv_other", NO_GRADER)
    keep("rv_seed", 0)
    keep("rv_reviewer", st.query_params.get("reviewer") or default_reviewer())
    keep("rv_blind", True)
    for key, allowed in (("rv_grader", options), ("rv_other", [NO_GRADER, *graders])):
        if st.session_state[key] not in allowed:  # another run's grader
            st.session_state[key] = allowed[0]
    cols = st.columns([4, 2, 2, 1, 2, 2])
    sampler = cols[0].selectbox(
        "Queue", list(SAMPLERS), key="rv_sampler", format_func=SAMPLERS.__getitem__
    )
    grader = cols[1].selectbox("Grader", options, key="rv_grader")
    other = cols[2].selectbox(
        "Second grader",
        [NO_GRADER, *graders],
        key="rv_other",
        help="For the disagreement queue, and shown beside the first grader's verdicts.",
    )
    seed = cols[3].number_input("Seed", min_value=0, step=1, key="rv_seed")
    reviewer = cols[4].text_input("Reviewer", key="rv_reviewer")
    blind = cols[5].toggle(
        "Blind mode",
        key="rv_blind",
        help="Hide each criterion's gold evidence until you have labelled it.",
    )
    remember(SETTINGS)
    name = str(reviewer).strip()
    if name and st.query_params.get("reviewer") != name:  # a reload keeps the reviewer
        st.query_params["reviewer"] = name
    return (
        sampler,
        None if grader == NO_GRADER else str(grader),
        None if other == NO_GRADER else str(other),
        int(seed),
        name,
        bool(blind),
    )


def _evidence(c: Criterion) -> None:
    ev = c.evidence
    if ev is None:
        st.caption("No gold evidence in the task for this criterion.")
        return
    lines = []
    if ev.category:
        lines.append(f"**category** {ev.category}")
    if ev.documents:
        lines.append("**documents** " + ", ".join(f"`{d}`" for d in ev.documents))
    if ev.key_terms:
        lines.append("**key terms** " + ", ".join(ev.key_terms))
    if ev.amounts:
        lines.append("**amounts** " + "; ".join(str(a.model_dump()) for a in ev.amounts))
    st.markdown("  \n".join(lines) or "(empty evidence)")
    for span in ev.spans:
        st.caption(f"> {span[:600]}")


def _label_badge(label: Any | None, current: str) -> str:
    if label is None:
        return "not labelled"
    stale = " · **stale** (given for an older memo)" if lb.is_stale(label, current) else ""
    tags = f" · {', '.join(label.tags)}" if label.tags else ""
    return f"your label: **{label.verdict}**{tags}{stale}"


def _criterion(
    run_dir: Path,
    s: EpisodeSummary,
    c: Criterion,
    index: int,
    n: int,
    *,
    focused: bool,
    focus_key: str,
    verdicts: pd.DataFrame,
    mine: Any | None,
    blind: bool,
    tags: Sequence[str],
) -> None:
    current = lb.memo_hash(s.memo)
    with st.container(border=True, key=f"rv_card_{index}"):
        mark = "▶ " if focused else ""
        st.markdown(f"{mark}**{c.id}** {c.title}")
        st.caption(c.match_criteria)
        for r in verdicts.loc[verdicts["criterion_id"] == c.id].itertuples(index=False):
            st.markdown(f"{VERDICT_ICON.get(r.verdict, '')} `{r.verdict}` ({r.grader}): {r.reason}")
        st.markdown(_label_badge(mine, current))
        tags_key, note_key = f"rv_tags_{s.episode_id}_{c.id}", f"rv_note_{s.episode_id}_{c.id}"
        cols = st.columns([1, 1, 1.6, 1])
        for col, verdict in zip(cols, ("PASS", "FAIL", "UNGRADABLE"), strict=False):
            col.button(
                verdict,
                key=f"rv_c{index}_{verdict}",
                on_click=_label,
                args=(run_dir, s, "criterion", verdict, c.id),
                kwargs={
                    "tags_key": tags_key,
                    "note_key": note_key,
                    "focus": (focus_key, min(index + 1, n - 1)),
                },
                type="primary" if mine is not None and mine.verdict == verdict else "secondary",
            )
        cols[3].button("Focus", key=f"rv_focus_{index}", on_click=_move, args=(focus_key, index))
        with st.expander("Tags and note"):
            st.multiselect("Tags", list(tags), key=tags_key)
            st.text_input("Note", key=note_key)
        decided = mine is not None and not lb.is_stale(mine, current)
        if not blind or decided:
            with st.expander("Gold evidence", expanded=decided):
                _evidence(c)
        else:
            st.caption("Gold evidence hidden until you label this criterion (blind mode).")


def _progress(queue: list[str], mine: dict[tuple[str, str, str | None], Any], view: RunView) -> int:
    """Episodes of the queue this reviewer labelled (any label of the current memo)."""
    done = set()
    for (eid, _, _), label in mine.items():
        s = view.summaries().get(eid)
        if s is not None and not lb.is_stale(label, lb.memo_hash(s.memo)):
            done.add(eid)
    return sum(1 for e in queue if e in done)


CALIBRATION_COLUMNS = ["grader", "criterion type", "n", "sensitivity", "specificity", "kappa", "raw pass rate", "corrected pass rate"]  # fmt: skip
"""Columns of :func:`calibration_table`."""


def _fmt(e: Estimate) -> str:
    if e.value is None:
        return f"undefined ({e.reason})"
    if e.low is None or e.high is None:
        return f"{e.value:.1%}" + (f" ({e.reason})" if e.reason else "")
    return f"{e.value:.1%} [{e.low:.1%}, {e.high:.1%}]"


def calibration_table(run_dir: Path, graders: Sequence[str]) -> pd.DataFrame:
    """Each grader of the run against every reviewer's criterion labels of current memos
    (:func:`~rlmdistill.traces.calibration.run_calibration`): the rows of ``judge-agreement
    --human`` and of the report (``Calibration.agreement``: per criterion type, then ``all``:
    pairs ``n``, sensitivity and specificity with 95% Wilson intervals, Cohen's kappa), and on
    each grader's ``all`` row its raw pass rate over the run's graded criteria and the
    Rogan-Gladen correction with its interval (:func:`~rlmdistill.stats.corrected_pass_rate`;
    "undefined (reason)" with too few labels or ``q0 + q1 <= 1``). :data:`CALIBRATION_COLUMNS`,
    shares as percentage text."""
    rows = []
    for g in graders:
        c = run_calibration(run_dir, g)
        rate = corrected_pass_rate(
            c.n_pass, c.n, true_pass=c.true_pass, m1=c.m1, true_fail=c.true_fail, m0=c.m0
        )
        for a in c.agreement:
            last = a.criterion_type == "all"
            rows.append(
                {
                    "grader": g,
                    "criterion type": a.criterion_type,
                    "n": a.n,
                    "sensitivity": _fmt(a.sensitivity),
                    "specificity": _fmt(a.specificity),
                    "kappa": f"{a.kappa:.3f}" if a.kappa is not None else f"undefined ({a.kappa_undefined})",
                    "raw pass rate": ("n/a" if rate.raw is None else f"{rate.raw:.1%} of {c.n}") if last else "",
                    "corrected pass rate": _fmt(rate.corrected) if last else "",
                }
            )  # fmt: skip
    return pd.DataFrame(rows, columns=CALIBRATION_COLUMNS)


def _calibration(run_dir: Path, view: RunView, sampler: Sampler) -> None:
    with st.expander("Graders against people's labels (this run)"):
        if not view.graders:
            st.info("Not graded (run `rlmdistill judge`).")
            return
        st.dataframe(calibration_table(run_dir, view.graders), hide_index=True, width="stretch")
        st.caption(
            "Every reviewer's latest criterion label of each current memo against the grader's "
            "verdict (a person's UNGRADABLE left out). The corrected rate assumes the labelled "
            "criteria are a random sample: label from the **Random** queue for it. The other "
            "queues pick episodes by the graders' verdicts, which makes sensitivity and "
            "specificity look better or worse than they are."
            + (" (You are on such a queue now.)" if sampler != "random" else "")
        )


def render(ws: Workspace) -> None:
    """Render the Review page."""
    run_dir = pick_run(ws, "review_run")
    if run_dir is None:
        return
    view = data.run_view(run_dir)
    sampler, grader, other, seed, reviewer, blind = _settings(view)
    if sampler == "disagreement" and (grader is None or other is None or grader == other):
        st.info("The disagreement queue needs two different graders (Grader, Second grader).")
        return
    items = queue_items(view, grader, other)
    try:
        mine, reviewed = _mine(run_dir, reviewer)
        human = _human(run_dir, view) if sampler == "informative" else None
        tags = lb.allowed_tags(run_dir)
    except (
        ValueError
    ) as exc:  # LabelsError, TraceFileError: a labels or tags file that does not read
        st.error(str(exc))
        return
    queue = review_queue(
        items,
        sampler,
        seed=seed,
        human=human,
        reviewed=reviewed,
    )
    if not queue:
        st.info(
            "No episode to review: "
            + (
                "the two graders agree on every criterion."
                if sampler == "disagreement"
                else "no episode of this run has a memo."
            )
        )
        return
    pos_key = f"rv_pos:{view.name}:{sampler}:{seed}"
    pos = min(int(st.session_state.get(pos_key, 0)), len(queue) - 1)
    eid = queue[pos]
    s = view.summary(eid)
    done = _progress(queue, mine, view)
    st.progress(done / len(queue), text=f"labelled {done} / queue {len(queue)}")
    _calibration(run_dir, view, sampler)
    if err := st.session_state.pop("rv_error", None):
        st.error(err)
    task = view.episode_task(s)
    criteria = list(task.criteria) if task else []
    focus_key = f"rv_focus:{view.name}:{eid}"
    focus = min(int(st.session_state.get(focus_key, 0)), max(len(criteria) - 1, 0))
    _install_keys()
    fc = criteria[focus] if criteria else None
    current = lb.memo_hash(s.memo)
    decision = mine.get((eid, "episode", None))
    st.markdown(
        f"episode **{pos + 1}** of {len(queue)} · `{eid[:12]}` · room {s.room.room_id} · "
        f"status {s.status} · [Open the trajectory ↗]({trace_link(view.name, eid)})  \n"
        + (f"focused criterion: **{fc.id}** · " if fc else "no rubric criteria · ")
        + (
            f"episode: **{decision.verdict}**"
            + (" (stale: an older memo)" if lb.is_stale(decision, current) else "")
            if decision is not None
            else "episode: not decided"
        )
    )
    if fc is not None:  # the focused card stands out
        st.html(f"<style>.st-key-rv_card_{focus} {{border: 2px solid #1f77b4 !important;}}</style>")
    # the keyboard's buttons: the focused criterion, the episode, the queue
    bar = st.columns([1, 1, 1.4, 1, 1, 0.4, 1, 1])
    common = {"focus": (focus_key, min(focus + 1, max(len(criteria) - 1, 0)))}
    for col, (key, verdict) in zip(
        bar[0:3], (("p", "PASS"), ("f", "FAIL"), ("u", "UNGRADABLE")), strict=True
    ):
        col.button(
            f"{verdict} `{key}`",
            key=KEYS[key],
            disabled=fc is None,
            width="stretch",
            on_click=_label,
            args=(run_dir, s, "criterion", verdict, fc.id if fc else None),
            kwargs={
                "tags_key": f"rv_tags_{eid}_{fc.id if fc else ''}",
                "note_key": f"rv_note_{eid}_{fc.id if fc else ''}",
                **common,
            },
        )
    for col, (key, verdict) in zip(bar[3:5], (("k", "keep"), ("r", "reject")), strict=True):
        col.button(
            f"{verdict.capitalize()} `{key}`",
            key=KEYS[key],
            width="stretch",
            on_click=_label,
            args=(run_dir, s, "episode", verdict, None),
            kwargs={"tags_key": f"rv_tags_{eid}_episode", "note_key": f"rv_note_{eid}_episode"},
        )
    bar[6].button(
        "Previous", key="rv_prev", width="stretch", on_click=_move, args=(pos_key, max(pos - 1, 0))
    )
    bar[7].button(
        "Next `n`",
        key=KEYS["n"],
        width="stretch",
        on_click=_move,
        args=(pos_key, min(pos + 1, len(queue) - 1)),
    )
    with st.expander("Episode tags and note (for keep / reject)"):
        st.multiselect("Tags", list(tags), key=f"rv_tags_{eid}_episode")
        st.text_input("Note", key=f"rv_note_{eid}_episode")
    left, right = st.columns([1, 1])
    with left, st.container(height=900):
        st.markdown("**Memo**")
        st.markdown(demote_headings(s.memo or ""))
    with right:
        if task is None:
            st.warning(
                f"Room {s.room.room_id} has no usable task.json: its criteria cannot be labelled."
            )
        verdicts = data.episode_verdicts(view, eid)
        shown = [g for g in (grader, other) if g]
        verdicts = verdicts.loc[verdicts["grader"].isin(shown)]
        for i, c in enumerate(criteria):
            _criterion(
                run_dir,
                s,
                c,
                i,
                len(criteria),
                focused=i == focus,
                focus_key=focus_key,
                verdicts=verdicts,
                mine=mine.get((eid, "criterion", c.id)),
                blind=blind,
                tags=tags,
            )
