"""Kernels: the compiled and fused pieces the models call for speed.

Owns: the additive energy (a compiled CPU kernel with a torch fallback: ``native``,
``additive_energy``), the per-step linear map and gradient sink of the step loops.
Each computes what its plain torch counterpart computes (tests compare them).

May import: runtime.
"""
