"""A module of fork_probe.py's own folder: a fork server must never pre-import it, so a change to
it between two attempts is seen by the second (the tests rewrite VALUE)."""
VALUE = "original"
