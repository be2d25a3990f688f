"""The RLM harness: one episode with its models, REPL and sandbox.

:mod:`~rlmdistill.harness.episode` runs one episode (root turns, code blocks in the REPL,
sub-calls and depth-2 subagents) and records it through a
:class:`~rlmdistill.harness.episode.TraceWriter`, so it knows nothing of run folders: the
collect stage hands it a writer of the run's trajectory file. Beside it: the prompts
(:mod:`~rlmdistill.harness.prompts`), the REPL process and its worker
(:mod:`~rlmdistill.harness.repl`, :mod:`~rlmdistill.harness.repl_worker`), the OS sandbox
(:mod:`~rlmdistill.harness.sandbox` with :mod:`~rlmdistill.harness.cgroups` and
:mod:`~rlmdistill.harness.seccomp`) and the bounded dispatch of sub-calls shared by a
process's episodes (:mod:`~rlmdistill.harness.dispatch`).
"""
