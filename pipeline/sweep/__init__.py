"""Sweep: the grid on Ray Tune.

Owns: the driver (plan the variants, run them, collect: ``driver``), what the sweep
came to and the records of it (``outcomes``), what a trial is given and runs
(``trial``), the driver-side callbacks (``callbacks``, ``tracking``), the variant cache
shared by DVC experiments (``cache``) and the disk space a sweep needs (``space``).

May import: scorers, config, runtime, data, train, tracking, translate, io, artifacts.
"""
