"""Data rooms and tasks: load a room folder (documents + ``task.json``), build rooms from CUAD.

Public API: :class:`DataRoom`, :class:`Document`, :class:`Task`, :class:`Criterion`,
:class:`Evidence`, :func:`load_task`, :func:`save_task`, :func:`build_cuad_room`,
:func:`build_cuad_main`, and the errors :class:`RoomError`, :class:`TaskError`,
:class:`CuadError`.
"""

from rlmdistill.rooms.cuad import BuildReport, CuadError, build_cuad_main, build_cuad_room
from rlmdistill.rooms.room import SUPPORTED_SUFFIXES, DataRoom, Document, RoomError, extract_text
from rlmdistill.rooms.task import (
    Criterion,
    CriterionType,
    Evidence,
    Task,
    TaskError,
    load_task,
    save_task,
)

__all__ = [
    "SUPPORTED_SUFFIXES",
    "BuildReport",
    "Criterion",
    "CriterionType",
    "CuadError",
    "DataRoom",
    "Document",
    "Evidence",
    "RoomError",
    "Task",
    "TaskError",
    "build_cuad_main",
    "build_cuad_room",
    "extract_text",
    "load_task",
    "save_task",
]
