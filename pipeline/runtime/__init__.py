"""Runtime: where and how code runs.

Owns: devices and per-task resources (``devices``), the Ray connection and task runner
(``cluster``), numeric precision (``precision``), and process-wide settings applied
once by an entry point (``process``: allocator, oneDNN cache).

May import: config, errors.
"""
