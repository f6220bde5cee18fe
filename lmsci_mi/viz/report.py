"""Deprecated: the report page moved to :mod:`lmsci_mi.cli.report` (it renders results, so it sits
above them, with the command line). This alias module goes in a later release."""

import warnings

from lmsci_mi.cli.report import (  # a deprecated alias (tests/unit/test_import_layers.py lists it)
    MAX_REPORT_BYTES as MAX_REPORT_BYTES,
)
from lmsci_mi.cli.report import CircuitsView as CircuitsView
from lmsci_mi.cli.report import Section as Section
from lmsci_mi.cli.report import build_report as build_report
from lmsci_mi.cli.report import plot_png as plot_png
from lmsci_mi.cli.report import section_from_file as section_from_file
from lmsci_mi.cli.report import write_report as write_report

warnings.warn(
    "lmsci_mi.viz.report is deprecated: import from lmsci_mi.cli.report",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = [
    "MAX_REPORT_BYTES",
    "CircuitsView",
    "Section",
    "build_report",
    "plot_png",
    "section_from_file",
    "write_report",
]
