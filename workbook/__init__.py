"""Shared helpers for the notebooks and tests: bug catalog and hybrids, extra toy tasks, plots, widgets."""
