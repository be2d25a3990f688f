"""Analysis: run summaries (``show``) and behaviour-shift reports (``report``)."""

DEFAULT_RESAMPLES = 2000
"""Bootstrap resamples (B) used unless told otherwise."""
DEFAULT_CONFIDENCE = 0.95
"""Two-sided confidence level of every interval unless told otherwise."""
