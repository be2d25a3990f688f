"""Room coverage: which characters of a room's documents reached a model during an episode.

:mod:`rlmdistill.coverage.index` holds the shingle index of a room (``CoverageIndex``, built
once per room and memory-mapped) and the per-episode probe (``CoverageProbe``) that the
harness feeds every model input; the result is a :class:`rlmdistill.traces.schema.Coverage`.
"""
