"""The ways in: the job queue and its worker, the Python API, the CLI and `serve`.
"""
