"""rlmdistill: self-distillation workbench for the root model of RLM due-diligence agents.

Stages (sub-packages) talk only through files on disk: ``rooms`` -> ``collect`` -> ``judge``
-> ``filter`` -> ``sft`` -> ``analysis`` -> ``dashboards``. See ``docs/architecture.md``.
"""

__version__ = "0.1.0"
