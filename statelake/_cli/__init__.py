"""The ``statelake`` command's implementation (the entry point is :mod:`statelake.cli`)."""
