"""Rich rendering of a :class:`~rlmdistill.analysis.summary.RunSummary` (CLI output only)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from rlmdistill.analysis.summary import RunSummary, Stat


def _fmt(stat: Stat, digits: int = 1, pct: bool = False) -> str:
    if stat.mean is None:
        return "n/a (no episodes)"
    scale = 100.0 if pct else 1.0
    unit = "%" if pct else ""
    mean = f"{stat.mean * scale:.{digits}f}{unit}"
    sd = f" ± {stat.sd * scale:.{digits}f}" if stat.sd is not None else " (n=1, no sd)"
    return f"{mean}{sd}  [{stat.min * scale:.{digits}f}..{stat.max * scale:.{digits}f}]"  # type: ignore[operator]


def render_summary(s: RunSummary, console: Console, per_episode: bool = True) -> None:
    """Print the run summary as tables: status counts, metrics, pass rates, episodes."""
    console.print(
        f"[bold]run {s.run_id}[/bold]  root {s.root}  sub {s.sub}  rooms {', '.join(s.rooms)}\n"
        f"episodes finished {s.n_episodes}/{s.n_planned}; memo citing a room document: "
        f"{s.memo_with_citation}/{s.n_episodes}; memo carrying sub-call error text (never kept "
        f"by the filter): {s.memo_with_sub_call_errors}/{s.n_episodes}"
    )
    t = Table(title="episodes by status")
    t.add_column("status")
    t.add_column("episodes", justify="right")
    for k, v in sorted(s.status_counts.items(), key=lambda kv: -kv[1]):
        t.add_row(k, str(v))
    console.print(t)
    if s.attempts is not None:
        a = s.attempts
        at = Table(
            title=f"failed attempts (server failures): {a.n_attempts} over {a.n_episodes} "
            f"episodes, {a.n_unfinished} unfinished (re-run to retry), {a.n_final} finished "
            "after their last attempt"
        )
        at.add_column("who, cause (model)")
        at.add_column("attempts", justify="right")
        for cause, n in a.by_cause.items():
            at.add_row(cause, str(n))
        console.print(at)
    if s.cache_hits is not None:
        c = s.cache_hits

        def hit(rate: float | None, unknown: int) -> str:
            known = "n/a" if rate is None else f"{rate:.1%}"
            return known + (f" ({unknown} episodes did not report it)" if unknown else "")

        console.print(
            "prefix-cache hit rate (cached / prompt tokens): root "
            f"{hit(c.root_rate, c.n_unknown_root)}, sub {hit(c.sub_rate, c.n_unknown_sub)}"
        )
    m = Table(title="per-episode metrics (mean ± sd [min..max])")
    m.add_column("metric")
    m.add_column("value")
    for name, stat in s.metrics.items():
        pct = name in ("coverage", "cited_share")
        m.add_row(name, _fmt(stat, 1, pct))
    console.print(m)
    for g in s.graders:
        gt = Table(title=f"pass rate, grader '{g.grader}' ({g.n_episodes} episodes graded)")
        gt.add_column("measure")
        gt.add_column("value")
        gt.add_row("pass rate (passed / all criteria)", _fmt(g.pass_rate, 1, True))
        gt.add_row("graded-only pass rate", _fmt(g.graded_pass_rate, 1, True))
        gt.add_row("weighted pass rate", _fmt(g.weighted_pass_rate, 1, True))
        gt.add_row("ungradable verdicts", str(g.n_ungradable))
        console.print(gt)
    for problem in s.task_problems:  # rooms left unscored: their episodes have no pass rate
        console.print(f"[yellow]unscored room:[/yellow] {problem}", soft_wrap=True)
    if per_episode and s.episodes:
        et = Table(title="episodes")
        for col in (
            "episode",
            "room",
            "status",
            "turns",
            "sub-calls",
            "cited",
            "coverage",
            "wall s",
        ):
            et.add_column(col)
        for g in s.graders:
            et.add_column(f"pass ({g.grader})")
        for e in s.episodes:
            row = [
                e.episode_id[:10],
                e.room.room_id,
                e.status,
                str(e.n_turns),
                str(e.n_sub_calls),
                f"{len(e.cited_documents)}/{e.room.n_documents}",
                f"{e.coverage.overall:.1%}" if e.coverage else "n/a",
                f"{e.wall_time_s:.0f}",
            ]
            for g in s.graders:
                pr = g.per_episode.get(e.episode_id)
                row.append("n/a" if pr is None else f"{pr:.1%}")
            et.add_row(*row)
        console.print(et)
