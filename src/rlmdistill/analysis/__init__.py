"""Analysis: run summaries (``show``) and behaviour-shift reports (``report``).

The statistics live one floor down, in :mod:`rlmdistill.stats` (the judge's evaluation uses
them too); the interval defaults are re-exported here.
"""

from rlmdistill.stats import DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES

__all__ = ["DEFAULT_CONFIDENCE", "DEFAULT_RESAMPLES"]
