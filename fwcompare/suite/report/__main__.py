"""A notebook process of the report: ``python -m fwcompare.suite.report``
(:func:`fwcompare.suite.report.notebooks.run_notebooks` starts them)."""
import sys

from .notebooks import _notebook_process

sys.exit(_notebook_process())
