"""statelake's PySpark jobs: ``python -m jobs.<name> --help`` (pipeline, maintenance, audit).

Each job also runs under ``spark-submit jobs/<name>.py`` from the repository root.
"""
