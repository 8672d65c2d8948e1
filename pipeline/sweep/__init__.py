"""Sweep: the grid on Ray Tune.

Owns: the driver (plan the variants, run them, collect, record: ``driver``), what a
trial is given and runs (``trial``), the driver-side callbacks (``callbacks``,
``tracking``) and the variant cache shared by DVC experiments (``cache``).

May import: scorers, config, runtime, data, train, tracking, translate, io, artifacts.
"""
