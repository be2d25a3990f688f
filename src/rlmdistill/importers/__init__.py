"""Traces in from other RLM harnesses: ``rlmdistill import rlm`` (the ``rlms`` package's JSONL
logs, :mod:`rlmdistill.importers.rlm`) and ``rlmdistill import verifiers`` (verifiers 0.4.0
rollouts of its RLM harness, :mod:`rlmdistill.importers.verifiers`) write a run folder like
``collect``'s, on the room given by ``--room``, so judge, filter, export, report and the
dashboard read it. Shared
parts (room, episode ids, writing the run): :mod:`rlmdistill.importers.common`. Field
mappings and what is lost: ``docs/bring-your-traces.md``."""
