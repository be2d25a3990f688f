"""Trace viewer: one episode turn by turn, its sub-calls under the turn and code block that made
them, the memo beside each criterion's verdict and reason, a coverage map of the room, and a
search inside message contents across the run.

Only the selected episode's trajectory is parsed (:func:`rlmdistill.dashboard.data.trajectory`).
The page computes the run's view (:func:`rlmdistill.dashboard.data.run_view`) once per rerun
and every helper reads that view: the run's stamp is computed once, its files read once.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import streamlit as st

from rlmdistill.dashboard import data
from rlmdistill.dashboard.data import Workspace
from rlmdistill.dashboard.runview import RunView
from rlmdistill.dashboard.widgets import fmt_pct, pick_run
from rlmdistill.traces.runs import Trajectory
from rlmdistill.traces.schema import EpisodeSummary, SubagentTurnRecord, SubCallRecord, TurnRecord
from rlmdistill.traces.tokens import answer_text

VERDICT_ICON = {"PASS": "✅", "FAIL": "❌", "UNGRADABLE": "❔", "MISSING": "➖"}


def coverage_frames(run: Path | RunView, episode_id: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The coverage map of one episode from its summary: ``(per_folder, per_document)``.

    ``per_folder``: ``folder, coverage, documents`` (documents of the room in that folder);
    ``per_document``: ``folder, document, coverage`` sorted by folder then document. Both are
    empty when the episode has no coverage measurement.
    """
    s = data.episode_summary(run, episode_id)
    if s.coverage is None:
        return (
            pd.DataFrame(columns=["folder", "coverage", "documents"]),
            pd.DataFrame(columns=["folder", "document", "coverage"]),
        )
    folders = pd.DataFrame(
        [
            {"folder": f or "(top level)", "coverage": v, "documents": s.room.folders.get(f, 0)}
            for f, v in sorted(s.coverage.per_folder.items())
        ],
        columns=["folder", "coverage", "documents"],
    )
    docs = pd.DataFrame(
        [
            {
                "folder": d.split("/", 1)[0] if "/" in d else "(top level)",
                "document": d,
                "coverage": v,
            }
            for d, v in sorted(s.coverage.per_document.items())
        ],
        columns=["folder", "document", "coverage"],
    )
    return folders, docs


def episode_pass_rate(view: RunView, episode_id: str) -> tuple[str | None, float | None]:
    """``(grader, pass rate)`` of one episode from the run table (the one scoring rule,
    :func:`~rlmdistill.traces.scores.score_episodes`): the first grader's (sorted);
    ``(None, None)`` when nobody graded the run, a ``None`` rate when this episode has none."""
    if not view.graders:
        return None, None
    grader = view.graders[0]
    table = view.table()
    rows = table.loc[table["episode_id"] == episode_id, f"pass_rate:{grader}"]
    if rows.empty or pd.isna(rows.iloc[0]):
        return grader, None
    return grader, float(rows.iloc[0])


def _episode_label(table: pd.DataFrame) -> dict[str, str]:
    return {
        r.episode_id: f"{r.room_id} · #{r.sample_index} · {r.status} · {r.episode_id[:10]}"
        for r in table.itertuples(index=False)
    }


def _pick_episode(view: RunView) -> str | None:
    table = view.table()
    if table.empty:
        st.info("This run has no finished episode yet.")
        return None
    labels = _episode_label(table)
    ids = list(labels)
    key = f"trace_episode:{view.name}"
    if key not in st.session_state:
        wanted = st.query_params.get("episode")
        st.session_state[key] = wanted if wanted in labels else ids[0]
    eid = st.selectbox("Episode", ids, key=key, format_func=labels.__getitem__)
    if st.query_params.get("episode") != eid:
        st.query_params["episode"] = eid
    return str(eid)


def _sub_call(
    call: SubCallRecord, children: list[SubCallRecord], sub_turns: list[SubagentTurnRecord]
) -> None:
    head = f"sub-call {call.call_id} (batch {call.batch_id}, {call.batch_size} prompts"
    head += (
        f", {call.latency_s:.1f} s, {call.usage.prompt_tokens}+{call.usage.completion_tokens} tok)"
    )
    st.markdown(f"**{head}**" + (" — subagent" if call.subagent else ""))
    if call.sources:
        st.caption(
            "sources: "
            + ", ".join(f"{s.get('doc_id')}[{s.get('start')}:{s.get('end')}]" for s in call.sources)
        )
    st.text_area("prompt", call.prompt, height=120, disabled=True, key=f"p{call.call_id}")
    if call.error:
        st.error(f"{call.error_kind or 'error'}: {call.error}")
    st.text_area("response", call.response or "", height=100, disabled=True, key=f"r{call.call_id}")
    for t in sub_turns:
        st.markdown(f"*subagent turn {t.turn}*")
        st.code((t.prefill or "") + t.completion, language="markdown")
        if t.observation is not None:
            st.text(t.observation[:2000])
    for c in children:
        st.markdown(
            f"↳ depth-2 call {c.call_id} (subagent turn {c.sub_turn}, block {c.sub_block}): "
            f"{(c.response or c.error or '')[:300]}"
        )


def _tokens_line(turn: TurnRecord) -> str:
    """One line on the turn's recorded token ids (or why there are none)."""
    tr = turn.tokens
    if tr is None:
        return "token ids: not recorded (trace older than schema version 2)"
    if tr.source == "unavailable":
        return f"token ids: not available ({tr.unavailable})"
    parts = [f"token ids ({tr.source}):"]
    if tr.prompt_n is not None:
        parts.append(f"prompt {tr.prompt_n:,} ({len(tr.prompt_new_ids or []):,} new)")
    parts.append(f"completion {len(tr.completion_ids or []):,}")
    if tr.logprobs:
        parts.append(f"mean logprob {sum(tr.logprobs) / len(tr.logprobs):.3f}")
    if tr.unavailable:
        parts.append(f"({tr.unavailable})")
    return " ".join(parts)


def _turn(turn: TurnRecord, traj: Trajectory) -> None:
    with st.container(border=True):
        st.markdown(
            f"#### Turn {turn.turn}  \n"
            f"{turn.usage.prompt_tokens} prompt + {turn.usage.completion_tokens} completion tokens"
            f" · {turn.latency_s:.1f} s" + (" · no-op" if turn.no_op else "")
        )
        if turn.reasoning:
            how = "separate field" if turn.reasoning_source == "field" else "inline <think>"
            with st.expander(f"Reasoning ({len(turn.reasoning):,} chars, {how})"):
                st.code(turn.reasoning, language="text", wrap_lines=True)
        st.markdown("**Root completion**" + (" (answer)" if turn.reasoning else ""))
        st.code(answer_text(turn), language="markdown", wrap_lines=True)
        st.caption(_tokens_line(turn))
        calls = [c for c in traj.sub_calls if c.turn == turn.turn and c.depth == 1]
        for block in turn.blocks:
            # the block's code is in the completion above: shown once
            st.markdown(f"**Code block {block.index}** ran in {block.duration_s:.2f} s")
            if block.error:  # the root's own code failed: its traceback, as the REPL printed it
                st.caption(f"block {block.index} raised (the root's code, not the dashboard):")
                st.code(block.error, language="text", wrap_lines=True)
            with st.expander(f"Full output of block {block.index} ({block.stdout_chars:,} chars)"):
                st.text(block.stdout_full)
            mine = [c for c in calls if c.block == block.index]
            if mine:
                with st.expander(f"{len(mine)} sub-call(s) made by block {block.index}"):
                    for c in mine:
                        children = [x for x in traj.sub_calls if x.parent_call_id == c.call_id]
                        sub_turns: list[SubagentTurnRecord] = [
                            t for t in traj.subagent_turns if t.call_id == c.call_id
                        ]
                        _sub_call(c, children, sub_turns)
        if turn.observation is not None:
            st.markdown("**REPL output as the root saw it**")
            st.code(turn.observation, language="text", wrap_lines=True)
        if turn.final_error:
            st.warning(turn.final_error)


def demote_headings(markdown: str, levels: int = 3) -> str:
    """``markdown`` with every ATX heading ``levels`` deeper (``# Memo`` -> ``#### Memo``, at
    most ``######``), so a memo's own headings never outrank the page's. Fenced code is left
    as it is."""
    out, fenced = [], False
    for line in markdown.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        m = None if fenced else re.match(r"^(#{1,6})(\s)", line)
        if m:
            line = "#" * min(6, len(m.group(1)) + levels) + line[len(m.group(1)) :]
        out.append(line)
    return "\n".join(out)


def _memo(view: RunView, s: EpisodeSummary) -> None:
    left, right = st.columns([3, 2])
    with left:
        st.markdown("**Memo**")
        if s.memo is None:
            st.warning(f"No memo (status {s.status}).")
        else:
            with st.container(border=True):
                st.markdown(demote_headings(s.memo))
    with right:
        st.markdown("**Rubric verdicts**")
        verdicts = data.episode_verdicts(view, s.episode_id)
        if verdicts.empty:
            st.info("Not graded (run `rlmdistill judge`).")
        for r in verdicts.itertuples(index=False):
            st.markdown(
                f"{VERDICT_ICON.get(r.verdict, '')} **{r.criterion_id}** {r.title} — "
                f"`{r.verdict}` ({r.grader})  \n{r.reason}"
            )


def _coverage(view: RunView, s: EpisodeSummary) -> None:
    folders, docs = coverage_frames(view, s.episode_id)
    if s.coverage is None:
        st.info("No coverage measured for this episode.")
        return
    st.metric(f"overall coverage ({s.coverage.method})", fmt_pct(s.coverage.overall))
    prog = st.column_config.ProgressColumn(min_value=0.0, max_value=1.0, format="percent")
    wide = {"folder": st.column_config.TextColumn(width="large")}
    st.markdown("**Per folder**")
    st.dataframe(
        folders, hide_index=True, column_config={"coverage": prog, **wide}, width="stretch"
    )
    st.markdown("**Per document**")
    st.dataframe(
        docs,
        hide_index=True,
        width="stretch",
        column_config={
            "coverage": prog,
            **wide,
            "document": st.column_config.TextColumn(width="large"),
        },
    )


def _search(view: RunView) -> None:
    q = st.text_input("Search message contents across this run", key=f"search:{view.name}")
    if not q.strip():
        return
    hits = data.search_run(view, q)
    st.caption(f"{len(hits)} hit(s)" + (" (first 200)" if len(hits) >= 200 else ""))
    if hits:
        st.dataframe(
            pd.DataFrame(hits, columns=list(hits[0]._fields)), hide_index=True, width="stretch"
        )


def render(ws: Workspace) -> None:
    """Render the Trace viewer page."""
    run_dir = pick_run(ws, "trace_run")
    if run_dir is None:
        return
    view = data.run_view(run_dir)  # the stamp once per rerun; every helper reads this view
    _search(view)
    episode_id = _pick_episode(view)
    if episode_id is None:
        return
    s = view.summary(episode_id)
    try:
        traj = data.trajectory(view, episode_id)
    except (FileNotFoundError, ValueError) as exc:
        st.error(str(exc))
        return
    cols = st.columns(6)
    cols[0].metric("status", s.status)
    grader, rate = episode_pass_rate(view, episode_id)
    cols[1].metric(
        f"pass rate ({grader})" if grader else "pass rate",
        fmt_pct(rate),
        help=None if grader else "not graded (run `rlmdistill judge`)",
    )
    cols[2].metric("turns", s.n_turns)
    cols[3].metric("sub-calls", s.n_sub_calls)
    cols[4].metric("coverage", fmt_pct(s.coverage.overall if s.coverage else None))
    cols[5].metric("wall time", f"{s.wall_time_s:.1f} s")
    st.caption(
        f"episode `{episode_id}` · room {s.room.room_id} ({s.room.n_documents} documents, "
        f"{s.room.n_chars:,} chars) · root {s.root_model} · sub {s.sub_model} · depth {s.depth}"
    )
    if traj.torn_tail:
        st.warning("The trajectory file ends with a torn line (crash); shown up to it.")
    turns_tab, memo_tab, cov_tab = st.tabs(["Turns", "Memo & verdicts", "Coverage map"])
    with turns_tab:
        with st.expander("Initial messages (system prompt, task)"):
            for m in traj.start.initial_messages:
                st.markdown(f"**{m.role}**")
                st.text(m.content)
        for turn in traj.turns:
            _turn(turn, traj)
        if traj.end is not None and traj.end.status_detail:
            st.caption(f"ended: {traj.end.status} — {traj.end.status_detail}")
    with memo_tab:
        _memo(view, s)
    with cov_tab:
        _coverage(view, s)
