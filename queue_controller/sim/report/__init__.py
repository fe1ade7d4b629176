"""The report: report.json, report.md and the PNG plots of a simulation.

``render`` writes them and prints the table; ``sharing`` words the team-share
section, ``plots`` draws, ``markdown`` formats tables.  It reads only
:mod:`..measurement.results`, and nothing of the engine.
"""
