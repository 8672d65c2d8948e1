"""The records the stages hand each other, typed: every module reads and writes them
through these types, never by string keys (a test walks the tree for it).

May import: config, errors.
"""
