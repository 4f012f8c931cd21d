"""Runnable examples that reproduce figures and tables of the papers (``python -m fedarena.examples.NAME``)."""
